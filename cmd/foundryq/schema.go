package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/foundryq/foundryq/events/schema"
	"github.com/foundryq/foundryq/gateway"
)

// documents are the specs `foundryq schema` prints besides the JSON
// Schemas: the AsyncAPI document of the NATS API and the gateway's OpenAPI.
var documents = map[string]struct {
	title string
	data  func() []byte
}{
	"asyncapi": {"AsyncAPI 3.0 document of the NATS API (YAML)", schema.AsyncAPI},
	"openapi":  {"OpenAPI 3.1 document of the gateway (as served at /openapi.json)", gateway.OpenAPI},
}

// runSchema prints the JSON Schema of one message of the wire contract
// (or the AsyncAPI or OpenAPI document), or lists them all.
func runSchema(_ context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("schema", "schema [NAME]\n\nWithout NAME, lists the JSON Schemas (draft 2020-12) of the wire contract, and the AsyncAPI and\nOpenAPI documents; with NAME, prints that one.")
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
		for _, name := range []string{"asyncapi", "openapi"} {
			fmt.Fprintf(tw, "%s\t%s\n", name, documents[name].title)
		}
		return tw.Flush()
	case 1:
		if d, ok := documents[f.Arg(0)]; ok {
			_, err := stdout.Write(d.data())
			return err
		}
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
