package foundry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"

	"github.com/openai/openai-go/v3/option"

	"github.com/foundryq/foundryq/internal/owned"
)

// AgentRef references a Foundry agent (sent instead of a model).
type AgentRef struct {
	Name    string
	Version string // empty: the latest version
}

// CreateRequest describes a response to start. Exactly one of Model or Agent is set.
type CreateRequest struct {
	Model           string          // deployment name
	Agent           *AgentRef       // sent as {"type":"agent_reference","name","version"} under Config.AgentField
	Input           json.RawMessage // a JSON string or an array of input items; required
	Instructions    string
	Tools           []json.RawMessage // Responses tools, passed through (e.g. type "mcp")
	Metadata        map[string]string
	MaxOutputTokens int // 0: not sent
	// PreviousResponseID continues that response (its output is the
	// context, and Input answers what it asked); it overrides an
	// Options["previous_response_id"].
	PreviousResponseID string
	// Options are raw Responses fields merged into the body (temperature,
	// reasoning, ...). They may not set a field Create owns (owned.RequestFields).
	Options map[string]json.RawMessage
}

// Create starts a background response and returns its event stream: POST
// responses with background, stream and store set to true. The request is sent
// exactly once: the SDK's retries are off, because a retried background create
// can start a second, billed run. On a connection error or a 5xx, whether a
// response was started is unknown; look for it by metadata (e.g. a run id) before
// creating again.
//
// The stream's first event is normally response.created (or queued), which
// carries the response id; keep it for Resume and Cancel.
func (c *Client) Create(ctx context.Context, req CreateRequest) (*Stream, error) {
	body, err := c.createBody(req)
	if err != nil {
		return nil, err
	}
	res, err := c.do(ctx, "create", "", http.MethodPost, "responses", body,
		option.WithMaxRetries(0),
		option.WithHeader("Accept", "text/event-stream"),
		option.WithHeader("Content-Type", "application/json"),
	)
	if err != nil {
		return nil, err
	}
	if err := checkEventStream("create", "", res); err != nil {
		return nil, err
	}
	return newStream(ctx, res, "", -1, c.cfg.StreamIdleTimeout), nil
}

// createBody validates req and builds the JSON body.
func (c *Client) createBody(req CreateRequest) ([]byte, error) {
	bad := func(field, reason string) error {
		return fmt.Errorf("foundry: create: %w: %s %s", ErrInvalidRequest, field, reason)
	}
	switch {
	case req.Model == "" && req.Agent == nil:
		return nil, bad("Model", "or Agent is required")
	case req.Model != "" && req.Agent != nil:
		return nil, bad("Model", "and Agent are mutually exclusive")
	case req.Agent != nil && req.Agent.Name == "":
		return nil, bad("Agent.Name", "is required")
	}
	input := bytes.TrimSpace(req.Input)
	if len(input) == 0 {
		return nil, bad("Input", "is required")
	}
	if !json.Valid(input) {
		return nil, bad("Input", "is not valid JSON")
	}
	if input[0] != '"' && input[0] != '[' {
		return nil, bad("Input", "must be a JSON string or array")
	}
	if req.MaxOutputTokens < 0 {
		return nil, bad("MaxOutputTokens", "must not be negative")
	}
	body := make(map[string]json.RawMessage, len(req.Options)+10)
	keys := make([]string, 0, len(req.Options))
	for k := range req.Options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := bytes.TrimSpace(req.Options[k])
		if isOwned(k, c.cfg.AgentField) {
			return nil, bad("Options["+k+"]", "sets a field foundryq owns")
		}
		if !json.Valid(v) {
			return nil, bad("Options["+k+"]", "is not valid JSON")
		}
		body[k] = v
	}
	set := func(k string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return bad(k, err.Error())
		}
		body[k] = b
		return nil
	}
	if req.Model != "" {
		if err := set("model", req.Model); err != nil {
			return nil, err
		}
	} else {
		ref := struct {
			Type    string `json:"type"`
			Name    string `json:"name"`
			Version string `json:"version,omitempty"`
		}{"agent_reference", req.Agent.Name, req.Agent.Version}
		if err := set(c.cfg.AgentField, ref); err != nil {
			return nil, err
		}
	}
	body["input"] = input
	if req.PreviousResponseID != "" {
		if err := set("previous_response_id", req.PreviousResponseID); err != nil {
			return nil, err
		}
	}
	if req.Instructions != "" {
		if err := set("instructions", req.Instructions); err != nil {
			return nil, err
		}
	}
	if len(req.Tools) > 0 {
		for i, t := range req.Tools {
			t = bytes.TrimSpace(t)
			if len(t) == 0 || t[0] != '{' || !json.Valid(t) {
				return nil, bad(fmt.Sprintf("Tools[%d]", i), "is not a JSON object")
			}
		}
		if err := set("tools", req.Tools); err != nil {
			return nil, err
		}
	}
	if len(req.Metadata) > 0 {
		if err := set("metadata", req.Metadata); err != nil {
			return nil, err
		}
	}
	if req.MaxOutputTokens > 0 {
		if err := set("max_output_tokens", req.MaxOutputTokens); err != nil {
			return nil, err
		}
	}
	if !c.cfg.IncludeObfuscation {
		body["stream_options"] = json.RawMessage(`{"include_obfuscation":false}`)
	}
	body["background"] = json.RawMessage("true")
	body["stream"] = json.RawMessage("true")
	body["store"] = json.RawMessage("true")
	out, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("foundry: create: %w: %v", ErrInvalidRequest, err)
	}
	return out, nil
}

func isOwned(key, agentField string) bool {
	return key == agentField || owned.Is(key)
}

// checkEventStream makes sure a 2xx reply is an event stream. Anything else
// (typically the JSON response object) is closed and reported as ErrNotStreaming,
// with the response id and status when the body names them.
func checkEventStream(op, id string, res *http.Response) error {
	ct := res.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if strings.EqualFold(mt, "text/event-stream") {
		return nil
	}
	defer closeBody(res)
	detail := fmt.Sprintf("status %d, content type %q", res.StatusCode, ct)
	if strings.Contains(mt, "json") {
		var w struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		dec := json.NewDecoder(io.LimitReader(res.Body, 1<<20))
		if dec.Decode(&w) == nil && w.ID != "" {
			detail += fmt.Sprintf(", response %s has status %s", w.ID, w.Status)
		}
	}
	return fmt.Errorf("foundry: %s: %w (%s)", opName(op, id), ErrNotStreaming, detail)
}
