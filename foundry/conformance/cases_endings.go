package conformance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// Ways a response ends other than a completion: Azure's content filter, an
// error before anything else, an MCP server whose tools cannot be listed,
// and the model's refusal (which completes). None can be triggered on the
// service on purpose and safely, so each runs on the emulator only, with
// the emu_* directive that scripts it.

// streamToEnd opens a background + streamed create with directives (and
// extra fields) and reads its frames to the end of the stream, past the
// terminal event.
func (e *Endpoint) streamToEnd(ctx context.Context, extra map[string]any, directives ...string) ([]frame, string, error) {
	body := e.createBody(backgroundStream, directives...)
	for k, v := range extra {
		body[k] = v
	}
	res, err := e.do(ctx, http.MethodPost, "responses", body)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, errorObservation(res), nil
	}
	frames, err := newFrameReader(res.Body).readToEnd()
	if err != nil {
		return frames, "", fmt.Errorf("read the stream: %w", err)
	}
	if len(frames) == 0 {
		return nil, "no frame", nil
	}
	return frames, "", nil
}

// firstTerminal is the index of the first terminal frame, or -1.
func firstTerminal(frames []frame) int {
	for i, f := range frames {
		if f.terminal() {
			return i
		}
	}
	return -1
}

// errorFrame describes an error event: "error code=C".
func errorFrame(f frame) string {
	code, ok := f.str("code")
	if !ok || code == "" {
		return "error without a code"
	}
	return "error code=" + code
}

// after describes the frames that follow index i: "nothing after" or
// their types (an error event with its code).
func after(frames []frame, i int) string {
	if i+1 >= len(frames) {
		return "nothing after"
	}
	var types []string
	for _, f := range frames[i+1:] {
		if f.typ == "error" {
			types = append(types, errorFrame(f))
			continue
		}
		types = append(types, f.typ)
	}
	return "then " + strings.Join(types, " ")
}

// failedThen describes a stream's terminal event (with its response's
// error) and what came after it.
func failedThen(frames []frame) string {
	i := firstTerminal(frames)
	if i < 0 {
		return fmt.Sprintf("no terminal event (last: %s)", frames[len(frames)-1].typ)
	}
	t := frames[i]
	head := t.typ
	if r := t.snapshot(); r != nil {
		head += ", " + r.errorCode()
	} else if t.typ == "error" {
		head = errorFrame(t)
	}
	return head + "; " + after(frames, i)
}

var caseContentFilterStream = Case{
	Name: "content filter on a stream",
	Want: "text deltas; response.failed, error null; then error code=content_policy_violation",
	Source: "maximhq/bifrost #6419 and PR #6652 (Azure's filter stops a stream with response.failed whose error is null, " +
		"then an error event content_policy_violation: \"The response was filtered due to the prompt triggering Azure " +
		"OpenAI's content management policy.\")",
	EmulatorOnly: "triggering Azure's content filter means sending harmful content on purpose; " +
		"the emulator filters on request (emu_content_filter=stream)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		frames, obs, err := e.streamToEnd(ctx, nil, "emu_content_filter", "stream")
		if frames == nil || err != nil {
			return obs, err
		}
		text := "text deltas"
		if deltaText(frames) == "" {
			text = "no text delta"
		}
		return text + "; " + failedThen(frames), nil
	},
}

var caseRefusal = Case{
	Name: "refusal",
	Want: "response.refusal.delta events, response.refusal.done with their text, no text delta; " +
		"response.completed, a refusal content part",
	Source: "openai-go v3.98.0 ResponseRefusalDeltaEvent and ResponseRefusalDoneEvent (a refusal streams as " +
		"response.refusal.delta, ends with response.refusal.done; the message's content part has type refusal)",
	EmulatorOnly: "a refusal needs a prompt the model declines, which is not certain and not cheap to find; " +
		"the emulator refuses on request (emu_refusal=1)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		frames, obs, err := e.streamToEnd(ctx, nil, "emu_refusal", "1")
		if frames == nil || err != nil {
			return obs, err
		}
		var deltas strings.Builder
		n, done, doneText := 0, false, ""
		for _, f := range frames {
			switch f.typ {
			case "response.refusal.delta":
				n++
				d, _ := f.str("delta")
				deltas.WriteString(d)
			case "response.refusal.done":
				done = true
				doneText, _ = f.str("refusal")
			}
		}
		var parts []string
		if n == 0 {
			parts = append(parts, "no response.refusal.delta")
		} else {
			parts = append(parts, "response.refusal.delta events")
		}
		switch {
		case !done:
			parts = append(parts, "no response.refusal.done")
		case doneText != deltas.String() || doneText == "":
			parts = append(parts, "response.refusal.done with another text")
		default:
			parts = append(parts, "response.refusal.done with their text")
		}
		if deltaText(frames) == "" {
			parts = append(parts, "no text delta")
		} else {
			parts = append(parts, "text deltas")
		}
		i := firstTerminal(frames)
		if i < 0 {
			return strings.Join(parts, ", ") + "; no terminal event", nil
		}
		end := frames[i].typ
		if r := frames[i].snapshot(); r != nil {
			part := "no refusal content part"
			for _, it := range r.Output {
				for _, c := range it.Content {
					if c.Type == "refusal" {
						part = "a refusal content part"
					}
				}
			}
			end += ", " + part
		}
		return strings.Join(parts, ", ") + "; " + end, nil
	},
}

var caseErrorFirst = Case{
	Name: "stream opening with an error",
	Want: "first error code=insufficient_quota, sequence_number 0; response.failed, error insufficient_quota; nothing after",
	Source: "maximhq/bifrost #5040 (a stream whose first event is an error insufficient_quota, then response.failed " +
		"carrying that error, and nothing else)",
	EmulatorOnly: "it needs an exhausted quota; the emulator opens the stream so on request (emu_error_first=1)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		frames, obs, err := e.streamToEnd(ctx, nil, "emu_error_first", "1")
		if frames == nil || err != nil {
			return obs, err
		}
		first := frames[0]
		head := "first " + first.typ
		if first.typ == "error" {
			head = "first " + errorFrame(first)
		}
		if first.hasSeq {
			head += fmt.Sprintf(", sequence_number %d", first.seq)
		} else {
			head += ", no sequence_number"
		}
		rest := frames[1:]
		if len(rest) == 0 {
			return head + "; nothing after", nil
		}
		return head + "; " + failedThen(rest), nil
	},
}

// listToolsFailedMessage is the reason of an mcp_list_tools item whose
// server (server_label "crm") could not be listed.
const listToolsFailedMessage = "Error retrieving tool list from MCP server: 'crm'. Http status code: 424 (Failed Dependency)"

var caseListToolsFailed = Case{
	Name: "MCP tools that cannot be listed",
	Want: fmt.Sprintf("response.mcp_list_tools.failed; response.failed, error null; nothing after; item mcp_list_tools, error %q",
		listToolsFailedMessage),
	Source: "RageAgainstThePixel/OpenAI-DotNet #486 (response.mcp_list_tools.failed, an mcp_list_tools item whose error " +
		"is \"Error retrieving tool list from MCP server: '...'. Http status code: 424 (Failed Dependency)\", " +
		"then response.failed with error null)",
	EmulatorOnly: "it needs an MCP server that fails; the emulator's first MCP server fails on request (emu_list_tools_fail=1)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		tool := map[string]any{"type": "mcp", "server_label": "crm", "server_url": "https://crm.example.invalid/mcp"}
		frames, obs, err := e.streamToEnd(ctx, map[string]any{"tools": []any{tool}}, "emu_list_tools_fail", "1")
		if frames == nil || err != nil {
			return obs, err
		}
		failed := "no response.mcp_list_tools.failed"
		for _, f := range frames {
			if f.typ == "response.mcp_list_tools.failed" {
				failed = f.typ
			}
		}
		o := failed + "; " + failedThen(frames)
		i := firstTerminal(frames)
		if i < 0 {
			return o, nil
		}
		item := "no mcp_list_tools item"
		if r := frames[i].snapshot(); r != nil {
			for _, it := range r.Output {
				if it.Type == "mcp_list_tools" {
					item = fmt.Sprintf("item mcp_list_tools, error %q", jsonScalar(it.Error))
				}
			}
		}
		return o + "; " + item, nil
	},
}
