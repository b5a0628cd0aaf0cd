// Package schema holds the JSON Schemas (draft 2020-12) of every message
// of foundryq's wire contract, embedded in the binary: the run request,
// each run event type, cancel requests and replies, the run state record,
// the answers of runs that ask, and the headers of events, dead letters,
// cancels and function tool calls. docs/contract.md describes them in
// words; the AsyncAPI document asyncapi.yaml ties them to the NATS
// subjects; `foundryq schema` prints them.
//
// The schemas say what foundryq sends. Readers of what workers write (run
// events, the state record, replies) should ignore fields they do not
// know, as the Go decoders do: the contract grows additively. The request
// bodies a worker decodes strictly (run request, cancel request, answer)
// have additionalProperties false.
package schema

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// BaseURL is where the schemas live; each schema's $id is BaseURL plus its
// file name, and they refer to each other by relative file names.
const BaseURL = "https://raw.githubusercontent.com/foundryq/foundryq/main/events/schema/"

//go:embed *.json asyncapi.yaml
var files embed.FS

// FS returns the schema files (NAME.json) and asyncapi.yaml.
func FS() fs.FS { return files }

// Names lists the schemas by name (the file name without .json), sorted.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Get returns the schema called name (as listed by Names; a trailing
// ".json" is accepted).
func Get(name string) ([]byte, error) {
	name = strings.TrimSuffix(name, ".json")
	if name == "" || strings.ContainsAny(name, "/\\") {
		return nil, fmt.Errorf("schema: no schema %q", name)
	}
	data, err := files.ReadFile(name + ".json")
	if err != nil {
		return nil, fmt.Errorf("schema: no schema %q (foundryq schema lists them)", name)
	}
	return data, nil
}

// AsyncAPI returns the AsyncAPI 3.0 document of the NATS API (YAML): every
// subject, who publishes and who subscribes, the messages by reference to
// the schemas, their headers, and the NATS users (roles) allowed each.
func AsyncAPI() []byte {
	data, _ := files.ReadFile("asyncapi.yaml")
	return data
}

// URL returns the $id of schema name.
func URL(name string) string { return BaseURL + strings.TrimSuffix(name, ".json") + ".json" }
