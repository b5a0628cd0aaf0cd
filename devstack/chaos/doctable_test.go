package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/internal/testkit"
)

// docs/guarantees.md shows a short chaos run's table: its rows are the ones
// Report.Table renders, no more and no fewer.
func TestGuaranteesTableRows(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "guarantees.md"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.SameSet(t, tableRows(string(doc)), tableRows(Report{}.Table()),
		"docs/guarantees.md: the chaos run's table lacks the row %q",
		"docs/guarantees.md: the chaos run's table has a row %q that Report.Table does not render")
}

// tableRows returns the first cells of the rows of the first table in s
// whose header is an empty cell and "runs".
func tableRows(s string) []string {
	var rows []string
	in := false
	for _, line := range strings.Split(s, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			if in {
				break
			}
			continue
		}
		label := strings.TrimSpace(cells[1])
		switch {
		case !in:
			in = label == "" && strings.TrimSpace(cells[2]) == "runs"
		case !strings.HasPrefix(label, "---"): // not the separator
			rows = append(rows, label)
		}
	}
	return rows
}
