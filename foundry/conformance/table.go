package conformance

import (
	"fmt"
	"io"
	"strings"
)

// Verdicts of a row.
const (
	Same         = "same"
	Different    = "DIFFERENT"
	EmulatorOnly = "emulator only"
	EndpointOnly = "endpoint only"
	NotCompared  = "not compared"
	NoEndpoint   = "no endpoint"
)

// Row is one line of the table: a behaviour, what each side gave, and
// whether they agree.
type Row struct {
	Behaviour string
	Emulator  string
	Endpoint  string
	Verdict   string
}

// Compare pairs the results of the same cases on the emulator and on an
// endpoint (a case missing from endpoint, or endpoint nil: NoEndpoint).
// The two lists are matched by case name, in the emulator's order.
func Compare(emulator, endpoint []Result) []Row {
	byName := make(map[string]Result, len(endpoint))
	for _, r := range endpoint {
		byName[r.Case] = r
	}
	rows := make([]Row, 0, len(emulator))
	for _, em := range emulator {
		ep, ran := byName[em.Case]
		row := Row{Behaviour: em.Case, Emulator: cell(em), Endpoint: "not run"}
		if ran {
			row.Endpoint = cell(ep)
		}
		switch {
		case em.NotRun != "":
			row.Verdict = EndpointOnly
		case !ran:
			row.Verdict = NoEndpoint
		case ep.NotRun != "":
			row.Verdict = EmulatorOnly
		case em.Err != nil || ep.Err != nil:
			row.Verdict = NotCompared
		case em.Observed == ep.Observed:
			row.Verdict = Same
		default:
			row.Verdict = Different
		}
		rows = append(rows, row)
	}
	return rows
}

// cell is a result as the table shows it.
func cell(r Result) string {
	switch {
	case r.NotRun != "":
		return "— (" + r.NotRun + ")"
	case r.Err != nil:
		return "error: " + r.Err.Error()
	}
	return r.Observed
}

// WriteTable writes rows as a Markdown table (behaviour, emulator,
// endpoint, same/different), ready to paste into an issue.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| behaviour | emulator | endpoint | same/different |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdCell(r.Behaviour), mdCell(r.Emulator), mdCell(r.Endpoint), r.Verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdCell keeps a value on one table line: pipes escaped, line breaks made
// spaces.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}
