package foundry

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestCreateRequestShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		prefix     string
		agentField string
		req        CreateRequest
		want       map[string]any
	}{
		{
			name:   "model on a resource endpoint",
			prefix: "/openai/v1",
			req: CreateRequest{
				Model: "gpt-4o", Input: json.RawMessage(`"hello"`), Instructions: "be brief",
				Tools:           []json.RawMessage{json.RawMessage(`{"type":"mcp","server_label":"s","server_url":"https://mcp.test","require_approval":"never"}`)},
				Metadata:        map[string]string{"run_id": "r1"},
				MaxOutputTokens: 64,
				Options:         map[string]json.RawMessage{"temperature": json.RawMessage(`0.2`), "reasoning": json.RawMessage(`{"effort":"low"}`)},
			},
			want: map[string]any{
				"model": "gpt-4o", "input": "hello", "instructions": "be brief",
				"tools":    []any{map[string]any{"type": "mcp", "server_label": "s", "server_url": "https://mcp.test", "require_approval": "never"}},
				"metadata": map[string]any{"run_id": "r1"}, "max_output_tokens": float64(64),
				"temperature": 0.2, "reasoning": map[string]any{"effort": "low"},
				"background": true, "stream": true, "store": true, "stream_options": map[string]any{"include_obfuscation": false},
			},
		},
		{
			name:   "agent on a project endpoint",
			prefix: "/api/projects/proj/openai/v1",
			req:    CreateRequest{Agent: &AgentRef{Name: "helper", Version: "3"}, Input: json.RawMessage(`[{"role":"user","content":"hi"}]`)},
			want: map[string]any{
				"agent_reference": map[string]any{"type": "agent_reference", "name": "helper", "version": "3"},
				"input":           []any{map[string]any{"role": "user", "content": "hi"}},
				"background":      true, "stream": true, "store": true, "stream_options": map[string]any{"include_obfuscation": false},
			},
		},
		{
			name:       "agent under a configured field, latest version",
			prefix:     "/api/projects/proj/openai/v1",
			agentField: "agent",
			req:        CreateRequest{Agent: &AgentRef{Name: "helper"}, Input: json.RawMessage(`"hi"`)},
			want: map[string]any{
				"agent": map[string]any{"type": "agent_reference", "name": "helper"},
				"input": "hi", "background": true, "stream": true, "store": true, "stream_options": map[string]any{"include_obfuscation": false},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, tt.prefix, func(w http.ResponseWriter, r *http.Request, body []byte) {
				writeRun(startSSE(w), "resp_1", 1)
			})
			c := f.client(t, func(cfg *Config) { cfg.AgentField = tt.agentField })
			s, err := c.Create(ctxT(t), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			drain(s)
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			r := f.requests()[0]
			if r.Method != http.MethodPost || r.Path != tt.prefix+"/responses" || r.Query != "" {
				t.Errorf("request = %s %s?%s, want POST %s/responses", r.Method, r.Path, r.Query, tt.prefix)
			}
			if got := r.Header.Get("Accept"); got != "text/event-stream" {
				t.Errorf("Accept = %q", got)
			}
			var got map[string]any
			if err := json.Unmarshal(r.Body, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("body =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

func TestCreateValidation(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		t.Error("an invalid request reached the server")
	})
	c := f.client(t)
	in := json.RawMessage(`"x"`)
	tests := []struct {
		name string
		req  CreateRequest
		want string
	}{
		{"neither model nor agent", CreateRequest{Input: in}, "Model"},
		{"both", CreateRequest{Model: "m", Agent: &AgentRef{Name: "a"}, Input: in}, "mutually exclusive"},
		{"agent without name", CreateRequest{Agent: &AgentRef{}, Input: in}, "Agent.Name"},
		{"no input", CreateRequest{Model: "m"}, "Input"},
		{"input not JSON", CreateRequest{Model: "m", Input: json.RawMessage(`hi`)}, "Input"},
		{"input an object", CreateRequest{Model: "m", Input: json.RawMessage(`{"a":1}`)}, "Input"},
		{"tool not an object", CreateRequest{Model: "m", Input: in, Tools: []json.RawMessage{json.RawMessage(`"mcp"`)}}, "Tools[0]"},
		{"option overrides stream", CreateRequest{Model: "m", Input: in, Options: map[string]json.RawMessage{"stream": json.RawMessage(`false`)}}, "Options[stream]"},
		{"option overrides agent field", CreateRequest{Model: "m", Input: in, Options: map[string]json.RawMessage{"agent_reference": json.RawMessage(`{}`)}}, "Options[agent_reference]"},
		{"option not JSON", CreateRequest{Model: "m", Input: in, Options: map[string]json.RawMessage{"temperature": json.RawMessage(`hot`)}}, "Options[temperature]"},
		{"negative max tokens", CreateRequest{Model: "m", Input: in, MaxOutputTokens: -1}, "MaxOutputTokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Create(ctxT(t), tt.req)
			if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrInvalidRequest naming %q", err, tt.want)
			}
		})
	}
}

// TestCreateNeverRetried: openai-go retries POST /responses on 5xx, 429 and
// connection errors by default; a retried background create can start a second
// billed run, so exactly one POST may reach the server.
func TestCreateNeverRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		sentinel error
	}{
		{"500", http.StatusInternalServerError, ErrServer},
		{"503", http.StatusServiceUnavailable, ErrServer},
		{"429", http.StatusTooManyRequests, ErrRateLimited},
		{"408", http.StatusRequestTimeout, nil},
		{"409", http.StatusConflict, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Retry-After-Ms", "1")
				writeAPIError(w, tt.status, "some_code", "server said no")
			})
			_, err := f.client(t).Create(ctxT(t), CreateRequest{Model: "m", Input: json.RawMessage(`"x"`)})
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tt.status || apiErr.Message != "server said no" || apiErr.Code != "some_code" {
				t.Fatalf("err = %#v", err)
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.sentinel)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("POSTs = %d, want exactly 1", n)
			}
		})
	}
	t.Run("connection dropped", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
			panic(http.ErrAbortHandler)
		})
		_, err := f.client(t).Create(ctxT(t), CreateRequest{Model: "m", Input: json.RawMessage(`"x"`)})
		if err == nil {
			t.Fatal("no error")
		}
		if n := len(f.requests()); n != 1 {
			t.Errorf("POSTs = %d, want exactly 1", n)
		}
	})
}

func TestGetAndCancelAreRetried(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Retry-After-Ms", "1")
		writeAPIError(w, http.StatusServiceUnavailable, "busy", "try later")
	})
	c := f.client(t)
	_, err := c.Get(ctxT(t), "resp_1")
	if !errors.Is(err, ErrServer) {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.requests()); n != 3 {
		t.Errorf("GETs = %d, want 3 (1 + 2 retries)", n)
	}
	c0 := f.client(t, func(cfg *Config) { cfg.MaxRetries = -1 })
	c0.Cancel(ctxT(t), "resp_1")
	if n := len(f.requests()); n != 4 {
		t.Errorf("requests = %d, want 4 (MaxRetries -1 → a single cancel)", n)
	}
}

func TestCreateNotAnEventStream(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, respObj("resp_9", "queued", nil))
	})
	_, err := f.client(t).Create(ctxT(t), CreateRequest{Model: "m", Input: json.RawMessage(`"x"`)})
	if !errors.Is(err, ErrNotStreaming) || !strings.Contains(err.Error(), "resp_9") {
		t.Errorf("err = %v, want ErrNotStreaming naming resp_9", err)
	}
}
