package docs

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events/schema"
)

// The wire contract page and the schemas (events/schema) say the same:
// the fields of each table are the properties of its schema, both ways
// where the table lists fields, and every property of each event type
// is named in its row.

// section returns the text of contract.md from the heading that starts
// with heading to the next heading of the same or a higher level.
func section(t *testing.T, page, heading string) string {
	t.Helper()
	i := strings.Index(page, "\n"+heading)
	if i < 0 {
		t.Fatalf("contract.md has no heading %q", heading)
	}
	rest := page[i+1:]
	level := strings.Index(heading, " ")
	end := len(rest)
	for j := strings.Index(rest, "\n#"); j >= 0; {
		line := rest[j+1:]
		if n := strings.Index(line, " "); n > 0 && n <= level && strings.Trim(line[:n], "#") == "" {
			end = j
			break
		}
		k := strings.Index(rest[j+1:], "\n#")
		if k < 0 {
			break
		}
		j += 1 + k
	}
	return rest[:end]
}

var word = regexp.MustCompile(`\w+`)

var backticked = regexp.MustCompile("`([^`]+)`")

// firstColumn returns the backticked names in the first column of the
// section's table rows (after its header).
func firstColumn(sec string) []string {
	var out []string
	lines := strings.Split(sec, "\n")
	for i, line := range lines {
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "/"), "|")
		header := i+1 < len(lines) && strings.HasPrefix(lines[i+1], "|---")
		if len(cells) < 3 || !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || header {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// rows maps the first backticked name of each table row to the row.
func rows(sec string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "/"), "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			out[m[1]] = line
		}
	}
	return out
}

type schemaDoc struct {
	Properties map[string]struct {
		Enum []string `json:"enum"`
	} `json:"properties"`
	Defs map[string]struct {
		Properties map[string]any `json:"properties"`
	} `json:"$defs"`
}

func loadSchema(t *testing.T, name string) schemaDoc {
	t.Helper()
	data, err := schema.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	var d schemaDoc
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func props(d schemaDoc) []string {
	var out []string
	for p := range d.Properties {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func sameSet(t *testing.T, what string, doc, sch []string) {
	t.Helper()
	doc = slices.Compact(slices.Sorted(slices.Values(doc)))
	for _, f := range doc {
		if !slices.Contains(sch, f) {
			t.Errorf("%s: contract.md names %q, which the schema does not have", what, f)
		}
	}
	for _, f := range sch {
		if !slices.Contains(doc, f) {
			t.Errorf("%s: the schema has %q, which contract.md does not name", what, f)
		}
	}
}

// braced returns the names inside the first `{a, b?, c}` after marker.
func braced(t *testing.T, text, marker string) []string {
	t.Helper()
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("contract.md lacks %q", marker)
	}
	rest := text[i+len(marker):]
	open, end := strings.Index(rest, "{"), strings.Index(rest, "}")
	var out []string
	for _, f := range strings.Split(rest[open+1:end], ",") {
		out = append(out, word.FindString(f)) // a, b?, "c": ..., "d"?: ...
	}
	return out
}

func TestContractPageMatchesSchemas(t *testing.T) {
	data, err := os.ReadFile("contract.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)

	t.Run("run request", func(t *testing.T) {
		sameSet(t, "RunRequest", firstColumn(section(t, page, "### RunRequest")), props(loadSchema(t, "run-request")))
	})
	t.Run("run state", func(t *testing.T) {
		sameSet(t, "run state", firstColumn(section(t, page, "### Run state")), props(loadSchema(t, "run-state")))
	})
	t.Run("run events", func(t *testing.T) {
		sec := section(t, page, "### RunEvent")
		r := rows(sec)
		var types []string
		for _, name := range schema.Names() {
			typ, ok := strings.CutPrefix(name, "event-")
			if !ok || name == "event-headers" {
				continue
			}
			types = append(types, typ)
			row, ok := r[typ]
			if !ok {
				t.Errorf("contract.md has no row for event type %s", typ)
				continue
			}
			for _, p := range props(loadSchema(t, name)) {
				switch p {
				case "run_id", "seq", "type", "time": // every event's, named above the table
					if !strings.Contains(sec, "`"+p+"`") {
						t.Errorf("contract.md does not say every event has %s", p)
					}
				default:
					if !strings.Contains(row, "`"+p) {
						t.Errorf("event %s: the schema has %s, which its row does not name", typ, p)
					}
				}
			}
		}
		for _, name := range firstColumn(sec) {
			if strings.Contains(name, ".") && !slices.Contains(types, name) {
				t.Errorf("contract.md has event type %s, which has no schema", name)
			}
		}
		sameSet(t, "usage", braced(t, sec, "`usage` is "), keys(loadSchema(t, "common").Defs["usage"].Properties))
	})
	t.Run("cancel", func(t *testing.T) {
		sec := section(t, page, "### Cancel")
		sameSet(t, "CancelReply", braced(t, sec, "Reply: "), props(loadSchema(t, "cancel-reply")))
		sameSet(t, "CancelRequest", braced(t, sec, "Request body (optional): "), props(loadSchema(t, "cancel-request")))
		var results []string
		for _, r := range loadSchema(t, "cancel-reply").Properties["result"].Enum {
			if r != "" { // the reply to a malformed body, said in words
				results = append(results, r)
			}
		}
		sameSet(t, "cancel results", firstColumn(sec), results)
	})
	t.Run("runs that ask", func(t *testing.T) {
		sec := section(t, page, "### Runs that ask")
		sameSet(t, "InputReply results", firstColumn(sec)[2:], loadSchema(t, "input-reply").Properties["result"].Enum)
		var answer []string
		for _, cell := range firstColumn(sec)[:2] {
			for _, m := range regexp.MustCompile(`"(\w+)"\??:`).FindAllStringSubmatch(cell, -1) {
				answer = append(answer, m[1])
			}
		}
		sameSet(t, "InputAnswer", answer, props(loadSchema(t, "input-answer")))
		sameSet(t, "InputReply", braced(t, sec, "The reply (`InputReply`) is "), props(loadSchema(t, "input-reply")))
	})
	t.Run("dead letters", func(t *testing.T) {
		sec := section(t, page, "### Dead letters")
		var named []string
		for _, m := range backticked.FindAllStringSubmatch(sec, -1) {
			named = append(named, m[1])
		}
		d := loadSchema(t, "dead-letter-headers")
		for _, h := range props(d) {
			if !slices.Contains(named, h) {
				t.Errorf("dead letters: contract.md does not name header %s", h)
			}
		}
		for _, code := range d.Properties["Foundryq-Dead-Code"].Enum {
			if !slices.Contains(named, code) {
				t.Errorf("dead letters: contract.md does not name code %s", code)
			}
		}
	})
	t.Run("links", func(t *testing.T) {
		for _, link := range []string{"../events/schema/", "../events/schema/asyncapi.yaml", "../gateway/openapi.json", "foundryq schema"} {
			if !strings.Contains(page, link) {
				t.Errorf("contract.md does not link %s", link)
			}
		}
	})
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
