package consumer

import (
	"errors"
	"reflect"

	"testing"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
)

func TestTranslate(t *testing.T) {
	resp := &foundry.Response{ID: "resp_1", Status: foundry.StatusQueued, Background: true, BackgroundKnown: true}
	hosted := &foundry.Response{ID: "resp_2", Status: foundry.StatusInProgress, BackgroundKnown: true}
	unknown := &foundry.Response{ID: "resp_3", Status: foundry.StatusInProgress}
	call := &foundry.OutputItem{ID: "mcp_1", Type: foundry.ItemMCPCall, Name: "lookup", ServerLabel: "crm"}
	failed := &foundry.OutputItem{ID: "mcp_2", Type: foundry.ItemMCPCall, Name: "lookup", ServerLabel: "crm", Status: foundry.StatusFailed}
	tests := []struct {
		name  string
		ev    foundry.Event
		check func(t *testing.T, st step)
	}{
		{"created names the response", foundry.Event{Type: foundry.EventCreated, Response: resp}, func(t *testing.T, st step) {
			if st.responseID != "resp_1" || st.foreground || st.emit != nil || st.end != nil {
				t.Fatalf("%+v", st)
			}
		}},
		{"background false is a foreground response", foundry.Event{Type: foundry.EventCreated, Response: hosted}, func(t *testing.T, st step) {
			if st.responseID != "resp_2" || !st.foreground {
				t.Fatalf("%+v", st)
			}
		}},
		{"background not said is not foreground", foundry.Event{Type: foundry.EventInProgress, Response: unknown}, func(t *testing.T, st step) {
			if st.foreground {
				t.Fatalf("%+v", st)
			}
		}},
		{"text delta", foundry.Event{Type: foundry.EventOutputTextDelta, Delta: "Hi"}, func(t *testing.T, st step) {
			if st.emit == nil || st.emit.Type != events.TypeTextDelta || st.emit.Text != "Hi" {
				t.Fatalf("%+v", st)
			}
		}},
		{"empty delta", foundry.Event{Type: foundry.EventOutputTextDelta}, func(t *testing.T, st step) {
			if st != (step{}) {
				t.Fatalf("%+v", st)
			}
		}},
		{"function arguments are not text", foundry.Event{Type: "response.function_call_arguments.delta", Delta: `{"a"`}, func(t *testing.T, st step) {
			if st != (step{}) {
				t.Fatalf("%+v", st)
			}
		}},
		{"mcp call starts", foundry.Event{Type: foundry.EventOutputItemAdded, Item: call}, func(t *testing.T, st step) {
			if st.emit == nil || st.emit.Type != events.TypeToolStarted || *st.emit.Tool != (events.Tool{Type: "mcp", Name: "lookup", ServerLabel: "crm", CallID: "mcp_1"}) {
				t.Fatalf("%+v", st.emit)
			}
		}},
		{"mcp call completes", foundry.Event{Type: foundry.EventOutputItemDone, Item: call}, func(t *testing.T, st step) {
			if st.emit == nil || st.emit.Type != events.TypeToolCompleted {
				t.Fatalf("%+v", st.emit)
			}
		}},
		{"mcp call fails", foundry.Event{Type: foundry.EventOutputItemDone, Item: failed}, func(t *testing.T, st step) {
			if st.emit == nil || st.emit.Type != events.TypeToolFailed || st.emit.Error.Code != events.CodeToolError {
				t.Fatalf("%+v", st.emit)
			}
		}},
		{"list tools item is not a tool call", foundry.Event{Type: foundry.EventOutputItemAdded, Item: &foundry.OutputItem{Type: foundry.ItemMCPListTools}}, func(t *testing.T, st step) {
			if st != (step{}) {
				t.Fatalf("%+v", st)
			}
		}},
		{"completed ends", foundry.Event{Type: foundry.EventCompleted, Response: &foundry.Response{ID: "resp_1", Status: foundry.StatusCompleted}}, func(t *testing.T, st step) {
			if st.end == nil || st.end.Status != foundry.StatusCompleted {
				t.Fatalf("%+v", st)
			}
		}},
		{"error event stops the stream, not the response", foundry.Event{Type: foundry.EventError, Code: "server_error", Message: "boom"}, func(t *testing.T, st step) {
			var apiErr *foundry.APIError
			if st.end != nil || !errors.As(st.streamErr, &apiErr) || apiErr.Code != "server_error" {
				t.Fatalf("%+v", st)
			}
		}},
		{"keepalive means nothing", foundry.Event{Type: foundry.EventKeepalive}, func(t *testing.T, st step) {
			if st != (step{}) {
				t.Fatalf("%+v", st)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, translate(&tt.ev)) })
	}
}

func TestEndOf(t *testing.T) {
	usage := &foundry.Usage{InputTokens: 3, OutputTokens: 5, TotalTokens: 8}
	approval := foundry.OutputItem{ID: "mcpr_1", Type: foundry.ItemMCPApprovalRequest, Name: "delete_account", ServerLabel: "crm", Arguments: `{"id":7}`}
	fcall := foundry.OutputItem{ID: "fc_1", CallID: "call_1", Type: foundry.ItemFunctionCall, Name: "lookup_order", Arguments: `{"order":1}`}
	tests := []struct {
		name      string
		resp      foundry.Response
		cancelled bool
		typ       events.EventType
		code      string
		retryable bool
	}{
		{"completed", foundry.Response{ID: "r", Status: foundry.StatusCompleted, Usage: usage}, false, events.TypeRunCompleted, "", false},
		{"incomplete", foundry.Response{ID: "r", Status: foundry.StatusIncomplete, IncompleteReason: "max_output_tokens"}, false, events.TypeRunCompleted, "", false},
		{"cancelled", foundry.Response{ID: "r", Status: foundry.StatusCancelled}, true, "", "", false},
		{"approval request", foundry.Response{ID: "r", Status: foundry.StatusCompleted, Output: []foundry.OutputItem{approval}}, false, events.TypeInputRequired, "", false},
		{"function call", foundry.Response{ID: "r", Status: foundry.StatusCompleted, Output: []foundry.OutputItem{fcall}}, false, events.TypeInputRequired, "", false},
		{"transient failure", foundry.Response{ID: "r", Status: foundry.StatusFailed, Error: &foundry.ResponseError{Code: "rate_limit_exceeded", Message: "slow down"}}, false, events.TypeRunFailed, "rate_limit_exceeded", true},
		{"permanent failure", foundry.Response{ID: "r", Status: foundry.StatusFailed, Error: &foundry.ResponseError{Code: "invalid_prompt"}}, false, events.TypeRunFailed, "invalid_prompt", false},
		{"failure without error", foundry.Response{ID: "r", Status: foundry.StatusFailed}, false, events.TypeRunFailed, events.CodeUpstreamFailed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, cancelled := endOf(&tt.resp)
			if cancelled != tt.cancelled || ev.Type != tt.typ {
				t.Fatalf("%+v cancelled=%v", ev, cancelled)
			}
			if tt.typ == events.TypeRunCompleted && (ev.Status != tt.resp.Status || ev.ResponseID != "r" || ev.IncompleteReason != tt.resp.IncompleteReason) {
				t.Fatalf("%+v", ev)
			}
			if tt.typ == events.TypeRunFailed && (ev.Error.Code != tt.code || ev.Error.Retryable == nil || *ev.Error.Retryable != tt.retryable) {
				t.Fatalf("%+v %+v", ev, ev.Error)
			}
		})
	}
	ev, _ := endOf(&foundry.Response{ID: "r", Status: foundry.StatusCompleted, Output: []foundry.OutputItem{approval, fcall}})
	want := []events.InputItem{
		{Kind: events.InputApproval, ID: approval.ID, Name: "delete_account", ServerLabel: "crm", Arguments: approval.Arguments},
		{Kind: events.InputFunctionCall, ID: fcall.CallID, Name: "lookup_order", Arguments: fcall.Arguments},
	}
	if !reflect.DeepEqual(ev.Items, want) || ev.ResponseID != "r" || ev.Status != foundry.StatusCompleted {
		t.Fatalf("input.required %+v, want items %+v", ev, want)
	}
}
