package conformance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

var caseMCPApproval = Case{
	Name: "MCP tool, require_approval left default",
	Want: "response.completed; output mcp_list_tools mcp_approval_request; no mcp_call, no text",
	Source: "Microsoft Learn \"Azure OpenAI Responses API\", Remote MCP server, Approvals; OpenAI guide \"Remote MCP\" " +
		"(require_approval defaults to always: the response ends with an mcp_approval_request item)",
	EmulatorOnly: "the service would list the tools of a real MCP server and the model choose to call one, " +
		"and the approval request waits for a person",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		tool := map[string]any{"type": "mcp", "server_label": "crm", "server_url": "https://crm.example.invalid/mcp"}
		body := e.createBody(backgroundStream, "emu_tool_ms", "0")
		body["tools"] = []any{tool}
		res, err := e.do(ctx, http.MethodPost, "responses", body)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return errorObservation(res), nil
		}
		frames, err := newFrameReader(res.Body).readAll()
		if err != nil {
			return "", fmt.Errorf("read the stream: %w", err)
		}
		if len(frames) == 0 {
			return "no frame", nil
		}
		last := frames[len(frames)-1]
		r := last.snapshot()
		if r == nil {
			return last.typ + "; no response", nil
		}
		var items []string
		call, text := "no mcp_call", "no text"
		for _, it := range r.Output {
			items = append(items, it.Type)
			if it.Type == "mcp_call" {
				call = "an mcp_call"
			}
		}
		if r.text() != "" {
			text = "text"
		}
		return fmt.Sprintf("%s; output %s; %s, %s", last.typ, strings.Join(items, " "), call, text), nil
	},
}
