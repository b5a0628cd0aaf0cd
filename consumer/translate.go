package consumer

import (
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
)

// step is what one upstream stream event means for a run.
type step struct {
	emit       *events.RunEvent  // a run event to relay (text, tool)
	responseID string            // a lifecycle event named the response
	status     string            // ... and its status (queued, in_progress)
	foreground bool              // ... and said it does not run in the background
	end        *foundry.Response // the response ended: its final snapshot
	// streamErr reports an error event: this stream stops, but the event
	// does not say whether the response goes on (it has been seen both
	// ways), so the run asks Foundry.
	streamErr error
}

// translate maps one upstream event to what it means for the run. It is
// pure: relaying, saving the id and ending the run are the caller's.
func translate(ev *foundry.Event) step {
	switch ev.Type {
	case foundry.EventCreated, foundry.EventQueued, foundry.EventInProgress:
		if ev.Response == nil || ev.Response.ID == "" {
			return step{}
		}
		st := step{responseID: ev.Response.ID, status: ev.Response.Status, foreground: ev.Response.BackgroundKnown && !ev.Response.Background}
		if ev.Response.Status == foundry.StatusCancelled {
			st.end = ev.Response
		}
		return st
	case foundry.EventOutputTextDelta:
		if ev.Delta != "" {
			return step{emit: &events.RunEvent{Type: events.TypeTextDelta, Text: ev.Delta}}
		}
	case foundry.EventRefusalDelta:
		if ev.Delta != "" {
			return step{emit: &events.RunEvent{Type: events.TypeRefusalDelta, Text: ev.Delta}}
		}
	case foundry.EventOutputItemAdded:
		if ev.Item != nil && ev.Item.Type == foundry.ItemMCPCall {
			return step{emit: &events.RunEvent{Type: events.TypeToolStarted, Tool: toolOf(ev.Item)}}
		}
	case foundry.EventOutputItemDone:
		if ev.Item != nil && ev.Item.Type == foundry.ItemMCPCall {
			if ev.Item.Error == "" && ev.Item.Status != foundry.StatusFailed {
				return step{emit: &events.RunEvent{Type: events.TypeToolCompleted, Tool: toolOf(ev.Item)}}
			}
			msg := ev.Item.Error
			if msg == "" {
				msg = "tool call failed"
			}
			return step{emit: &events.RunEvent{Type: events.TypeToolFailed, Tool: toolOf(ev.Item),
				Error: &events.Error{Code: events.CodeToolError, Message: truncateText(msg)}}}
		}
	case foundry.EventCompleted, foundry.EventIncomplete, foundry.EventFailed, foundry.EventCancelled:
		if ev.Response != nil {
			return step{end: ev.Response}
		}
	case foundry.EventError:
		return step{streamErr: &foundry.APIError{Op: "stream", Code: ev.Code, Param: ev.Param, Message: ev.Message}}
	}
	return step{}
}

// endOf decides how a run's response ended from its final snapshot:
// cancelled (by someone else), or the event that follows it. A response
// that completed but stopped at approval requests or function calls did
// not finish the run: it pauses (input.required) until its caller answers.
func endOf(resp *foundry.Response) (ev events.RunEvent, cancelled bool) {
	switch resp.Status {
	case foundry.StatusCancelled:
		return events.RunEvent{}, true
	case foundry.StatusCompleted, foundry.StatusIncomplete:
		if items := askedOf(resp); len(items) > 0 {
			return events.RunEvent{Type: events.TypeInputRequired, ResponseID: resp.ID, Status: resp.Status,
				Items: items, Usage: usageOf(resp.Usage)}, false
		}
		return events.RunEvent{Type: events.TypeRunCompleted, ResponseID: resp.ID, Status: resp.Status,
			IncompleteReason: resp.IncompleteReason, Refusal: resp.Refusal != "", Usage: usageOf(resp.Usage)}, false
	}
	return failureOf(resp), false
}

// failureOf is the run.failed of a response Foundry reports failed: a
// failed MCP tool listing (which the response's own error does not name,
// RageAgainstThePixel/OpenAI-DotNet#486) and the content filter have
// codes of their own; any other code passes through as Foundry sent it.
func failureOf(resp *foundry.Response) events.RunEvent {
	if msg := listToolsFailure(resp); msg != "" {
		return failedWith(resp.ID, events.CodeMCPListToolsFailed, false, msg)
	}
	switch {
	case resp.Error == nil:
		return failedWith(resp.ID, events.CodeUpstreamFailed, false, "Foundry reported status "+resp.Status)
	case contentFiltered(resp.Error.Code, ""):
		return failedWith(resp.ID, events.CodeContentFilter, false, orDefault(resp.Error.Message, "Foundry's content filter stopped the response"))
	}
	return failedWith(resp.ID, orDefault(resp.Error.Code, events.CodeUpstreamFailed), resp.Error.Retryable(), resp.Error.Message)
}

// listToolsFailure is the error of the response's first mcp_list_tools
// item that has one, or "".
func listToolsFailure(resp *foundry.Response) string {
	for _, it := range resp.Output {
		if it.Type == foundry.ItemMCPListTools && it.Error != "" {
			return it.Error
		}
	}
	return ""
}

// contentFiltered reports whether Foundry's error code (or innererror
// code) says its content filter stopped the prompt or the response: Azure
// answers a prompt with code content_filter and innererror
// ResponsibleAIPolicyViolation (openai/openai-dotnet#55), and ends a
// filtered stream with an error event content_policy_violation
// (maximhq/bifrost#6419).
func contentFiltered(code, inner string) bool {
	switch code {
	case "content_filter", "content_policy_violation":
		return true
	}
	return inner == "ResponsibleAIPolicyViolation"
}

// askedOf lists what a finished response asks its caller: its approval
// requests and function calls, in output order.
func askedOf(resp *foundry.Response) []events.InputItem {
	var items []events.InputItem
	for _, it := range resp.Output {
		switch it.Type {
		case foundry.ItemMCPApprovalRequest:
			items = append(items, events.InputItem{Kind: events.InputApproval, ID: it.ID, Name: it.Name,
				ServerLabel: it.ServerLabel, Arguments: it.Arguments})
		case foundry.ItemFunctionCall:
			items = append(items, events.InputItem{Kind: events.InputFunctionCall, ID: it.CallID, Name: it.Name,
				Arguments: it.Arguments})
		}
	}
	return items
}

func failedWith(responseID, code string, retryable bool, message string) events.RunEvent {
	return events.RunEvent{Type: events.TypeRunFailed, ResponseID: responseID,
		Error: &events.Error{Code: code, Message: truncateText(message), Retryable: &retryable}}
}

func toolOf(it *foundry.OutputItem) *events.Tool {
	return &events.Tool{Type: "mcp", Name: it.Name, ServerLabel: it.ServerLabel, CallID: it.ID}
}

func usageOf(u *foundry.Usage) *events.Usage {
	if u == nil {
		return nil
	}
	return &events.Usage{
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.TotalTokens,
		CachedTokens: u.CachedTokens, ReasoningTokens: u.ReasoningTokens,
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
