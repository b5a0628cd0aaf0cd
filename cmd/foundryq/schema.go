package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/foundryq/foundryq/events/schema"
)

// runSchema prints the JSON Schema of one message of the wire contract,
// or lists them all.
func runSchema(_ context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("schema", "schema [NAME]\n\nWithout NAME, lists the JSON Schemas (draft 2020-12) of the wire contract; with NAME, prints that schema.")
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	switch f.NArg() {
	case 0:
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, name := range schema.Names() {
			data, _ := schema.Get(name)
			var doc struct {
				Title string `json:"title"`
			}
			_ = json.Unmarshal(data, &doc)
			fmt.Fprintf(tw, "%s\t%s\n", name, doc.Title)
		}
		return tw.Flush()
	case 1:
		data, err := schema.Get(f.Arg(0))
		if err != nil {
			return usageError{err}
		}
		_, err = stdout.Write(data)
		return err
	default:
		return usageError{fmt.Errorf("want at most one schema name, got %d arguments", f.NArg())}
	}
}
