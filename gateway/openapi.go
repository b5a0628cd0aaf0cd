package gateway

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/foundryq/foundryq/events/schema"
)

// openapiSource is the OpenAPI 3.1 document of the gateway without the
// wire contract's schemas, which OpenAPI adds from events/schema.
//
//go:embed openapi.json
var openapiSource []byte

// OpenAPI returns the OpenAPI 3.1 document of the gateway's HTTP API, as
// served at GET /openapi.json: every endpoint, bearer authentication, the
// error object, and the wire contract's JSON Schemas (events/schema) under
// components/schemas by their names (run-request, run-state, event-*,
// cancel-reply, ...), so that the document stands alone. CreateRunRequest
// is run-request with run_id optional and callback_url added.
func OpenAPI() []byte {
	data, err := openapiDoc()
	if err != nil {
		panic(err) // the embedded files are fixed at build time; a test builds it
	}
	return data
}

var openapiDoc = sync.OnceValues(buildOpenAPI)

func buildOpenAPI() ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(openapiSource, &doc); err != nil {
		return nil, fmt.Errorf("gateway: openapi.json: %w", err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for _, name := range schema.Names() {
		data, err := schema.Get(name)
		if err != nil {
			return nil, err
		}
		var s map[string]any
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("gateway: schema %s: %w", name, err)
		}
		delete(s, "$id") // a component has the document's base: refs point into it
		delete(s, "$schema")
		schemas[name] = rewriteRefs(name, s)
	}
	create, err := createRunRequestSchema(schemas["run-request"])
	if err != nil {
		return nil, err
	}
	schemas["CreateRunRequest"] = create
	return json.MarshalIndent(doc, "", "  ")
}

// rewriteRefs turns the schema files' references ("common.json#/$defs/x",
// "#/$defs/y", "run-event.json") into references to components/schemas.
func rewriteRefs(name string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if ref, ok := e.(string); ok && k == "$ref" {
				file, frag, _ := strings.Cut(ref, "#")
				target := name
				if file != "" {
					target = strings.TrimSuffix(file, ".json")
				}
				v[k] = "#/components/schemas/" + target + frag
				continue
			}
			v[k] = rewriteRefs(name, e)
		}
	case []any:
		for i, e := range v {
			v[i] = rewriteRefs(name, e)
		}
	}
	return v
}

// createRunRequestSchema derives the body of POST /v1/runs from the run
// request's schema: run_id optional, callback_url added.
func createRunRequestSchema(runRequest any) (map[string]any, error) {
	data, err := json.Marshal(runRequest)
	if err != nil {
		return nil, err
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	s["title"] = "CreateRunRequest"
	s["description"] = "The body of POST /v1/runs: a run request whose run_id is optional (the gateway makes one), with callback_url to ask for a signed completion callback."
	var required []any
	for _, r := range s["required"].([]any) {
		if r != "run_id" {
			required = append(required, r)
		}
	}
	s["required"] = required
	props := s["properties"].(map[string]any)
	props[CallbackURLField] = map[string]any{
		"description": "Where to POST the run's terminal event, signed (docs/gateway.md); the gateway must have a callback secret.",
		"type":        "string",
		"format":      "uri",
	}
	return s, nil
}

// serveOpenAPI serves GET /openapi.json.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	data := OpenAPI()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}
