package gateway_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/events/contract"
	"github.com/foundryq/foundryq/events/schema"
	"github.com/foundryq/foundryq/gateway"
)

// withoutProperty returns the schema files with property prop removed
// from the properties object at pointer in file (and from its required
// list, so that only the declaration is missing).
func withoutProperty(t *testing.T, file, pointer, prop string) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(schema.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(schema.FS(), name)
		if err != nil {
			return err
		}
		if name == file {
			var doc map[string]any
			if err := json.Unmarshal(data, &doc); err != nil {
				return err
			}
			node := doc
			for _, tok := range strings.Split(strings.Trim(pointer, "/"), "/") {
				if tok != "" {
					node = node[tok].(map[string]any)
				}
			}
			props := node["properties"].(map[string]any)
			if _, ok := props[prop]; !ok {
				return errors.New("no property " + prop + " at " + file + "#" + pointer)
			}
			delete(props, prop)
			if req, ok := node["required"].([]any); ok {
				var kept []any
				for _, r := range req {
					if r != prop {
						kept = append(kept, r)
					}
				}
				node["required"] = kept
			}
			if data, err = json.Marshal(doc); err != nil {
				return err
			}
		}
		out[name] = &fstest.MapFile{Data: data}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Removing a property from a schema makes the checks of real traffic fail:
// the NATS tap for messages, the OpenAPI checker for HTTP exchanges. A
// field the code sends and the schema lacks cannot go unnoticed.
func TestRemovingAFieldFailsRealTraffic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, pointer, prop string
		want                      string // in a mismatch
	}{
		{"a run event's field", "event-run.completed.json", "", "response_id", "/response_id"},
		{"a field of usage, in events and state", "common.json", "/$defs/usage", "total_tokens", "/usage/total_tokens"},
		{"a state record's field", "run-state.json", "", "digest", "/digest"},
		{"a run request's field", "run-request.json", "", "metadata", "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, 1)
			set, err := contract.LoadFS(withoutProperty(t, tc.file, tc.pointer, tc.prop), nil)
			if err != nil {
				t.Fatal(err)
			}
			tap, err := contract.NewTap(e.nc, set, events.Names{})
			if err != nil {
				t.Fatal(err)
			}
			g := e.gateway(gateway.Config{})
			cr := g.create(t, runRequest(map[string]string{"emu_tokens": "3"}))
			e.watchAll(cr.RunID)
			errs := tap.Close()
			if tap.Checked() == 0 {
				t.Fatal("the tap checked nothing")
			}
			var found bool
			for _, err := range errs {
				found = found || strings.Contains(err.Error(), tc.want)
			}
			if !found {
				t.Fatalf("no mismatch about %s in %d errors: %v", tc.want, len(errs), errs)
			}
		})
	}
	t.Run("a gateway response's field", func(t *testing.T) {
		t.Parallel()
		e := setup(t, 1)
		var doc map[string]any
		if err := json.Unmarshal(gateway.OpenAPI(), &doc); err != nil {
			t.Fatal(err)
		}
		schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
		delete(schemas["CreateResponse"].(map[string]any)["properties"].(map[string]any), "existing")
		schemas["CreateResponse"].(map[string]any)["required"] = []any{"run_id", "status"}
		mutated, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := contract.NewHTTPChecker(mutated, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := e.gateway(gateway.Config{})
		hc := &http.Client{Transport: c.Transport(nil)}
		t.Cleanup(hc.CloseIdleConnections)
		g.http = hc
		g.create(t, runRequest(nil))
		errs := c.Errors()
		if c.Checked() == 0 || len(errs) == 0 || !strings.Contains(errs[0].Error(), "existing") {
			t.Fatalf("checked %d exchanges, errors %v; want one about existing", c.Checked(), errs)
		}
	})
}
