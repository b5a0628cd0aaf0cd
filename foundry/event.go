package foundry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Stream event types foundryq interprets. Others pass through with Type and Raw.
const (
	EventCreated            = "response.created"
	EventQueued             = "response.queued"
	EventInProgress         = "response.in_progress"
	EventCompleted          = "response.completed"
	EventFailed             = "response.failed"
	EventIncomplete         = "response.incomplete"
	EventCancelled          = "response.cancelled" // not in the spec; accepted as terminal if a server sends it
	EventError              = "error"
	EventOutputTextDelta    = "response.output_text.delta"
	EventOutputTextDone     = "response.output_text.done"
	EventOutputItemAdded    = "response.output_item.added"
	EventOutputItemDone     = "response.output_item.done"
	EventMCPCallInProgress  = "response.mcp_call.in_progress"
	EventMCPCallCompleted   = "response.mcp_call.completed"
	EventMCPCallFailed      = "response.mcp_call.failed"
	EventMCPListToolsFailed = "response.mcp_list_tools.failed"
	// EventRefusalDelta carries a piece of the model's refusal text, in a
	// content part of type "refusal" (openai-go v3.98.0
	// ResponseRefusalDeltaEvent); EventRefusalDone the whole of it.
	EventRefusalDelta = "response.refusal.delta"
	EventRefusalDone  = "response.refusal.done"
	// EventKeepalive is an undocumented event the service sends while a
	// response is slow to start or to continue: {"type":"keepalive",
	// "sequence_number":N} (openai/openai-node#1964, openai/openai-java#776;
	// seen about every 30 s before a response.created that came minutes
	// after the headers, BerriAI/litellm#39617). It carries no state.
	EventKeepalive = "keepalive"
)

// Event is one decoded stream event. Only the fields foundryq needs are decoded;
// Raw holds the whole data payload.
type Event struct {
	Type           string
	SequenceNumber int64  // valid when HasSeq
	HasSeq         bool   // the event carried a sequence_number (Stream.LastSeq ignores those of keepalive and error events)
	Delta          string // output_text.delta and refusal.delta
	Text           string // output_text.done: the full text of the part
	ItemID         string
	OutputIndex    int
	Response       *Response   // response.created/queued/in_progress/completed/failed/incomplete (never nil on these)
	Item           *OutputItem // response.output_item.added/done (never nil on these)
	Code           string      // type "error"
	Message        string      // type "error"
	Param          string      // type "error"
	// Raw is the event's JSON data. It is only valid until the next call to
	// Stream.Next; copy it to keep it.
	Raw []byte
}

// Terminal reports whether the event ends a response stream: response.completed,
// response.failed, response.incomplete, response.cancelled or error.
func (e *Event) Terminal() bool { return isTerminal(e.Type) }

func isTerminal(t string) bool {
	switch t {
	case EventCompleted, EventFailed, EventIncomplete, EventCancelled, EventError:
		return true
	}
	return false
}

// wireEvent is the JSON shape of a stream event (only the fields we use).
type wireEvent struct {
	Type           string        `json:"type"`
	SequenceNumber optInt64      `json:"sequence_number"`
	Delta          string        `json:"delta"`
	Text           string        `json:"text"`
	ItemID         string        `json:"item_id"`
	OutputIndex    int           `json:"output_index"`
	Response       *wireResponse `json:"response"`
	Item           *wireItem     `json:"item"`
	Code           flexString    `json:"code"`
	Message        string        `json:"message"`
	Param          flexString    `json:"param"`
	// Error is a top-level {"error": {...}} frame (not the "error" event type,
	// which carries code and message at the top level).
	Error errorFrame `json:"error"`
}

// errorFrame is a top-level "error" value: normally an object, but a bare string
// is accepted too.
type errorFrame struct {
	wireError
	present bool
}

func (f *errorFrame) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	f.present = true
	switch data[0] {
	case '{':
		if err := json.Unmarshal(data, &f.wireError); err != nil {
			f.wireError = wireError{Message: string(data)}
		}
	case '"':
		if err := json.Unmarshal(data, &f.Message); err != nil {
			f.Message = string(data)
		}
	default:
		f.Message = string(data)
	}
	return nil
}

// optInt64 is an integer whose presence is recorded (null counts as absent).
type optInt64 struct {
	V  int64
	OK bool
}

func (o *optInt64) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	v, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil {
		// Accept an integral number written as a float (1.0, 1e3).
		f, ferr := strconv.ParseFloat(string(data), 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			if len(data) > 32 {
				data = append(data[:32:32], "..."...)
			}
			return fmt.Errorf("sequence_number %s is not an integer", data)
		}
		v = int64(f)
	}
	o.V, o.OK = v, true
	return nil
}

// decodeEventInto decodes one event's data into ev (which it resets). name is the
// SSE event name, used when the JSON has no type. A top-level error frame
// returns an *APIError; undecodable data returns an error wrapping ErrMalformedEvent.
//
// w is caller-owned scratch space (reused per stream: one allocation less per event).
func decodeEventInto(name, data []byte, ev *Event, w *wireEvent) error {
	*ev = Event{Raw: data}
	*w = wireEvent{}
	if err := json.Unmarshal(data, w); err != nil {
		// A field of an unexpected type is tolerated (the rest still decodes:
		// losing a usage figure beats losing the terminal event), except where the
		// relay depends on it: the type, the text of a known delta, and
		// sequence_number (whose decoder fails with a non-type error).
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) || typeErr.Field == "" || typeErr.Field == "type" ||
			(typeErr.Field == "delta" && knownEvent(w.Type)) {
			return fmt.Errorf("%w: %s: %v", ErrMalformedEvent, eventLabel(name, w.Type), err)
		}
	}
	if w.Type == "" {
		w.Type = string(name)
	}
	if w.Error.present && w.Type != EventError {
		return &APIError{Op: "stream", Code: string(w.Error.Code), Type: w.Error.Type, Param: string(w.Error.Param),
			Message: w.Error.Message, Details: w.Error.details()}
	}
	if w.Type == "" {
		return fmt.Errorf("%w: event without a type", ErrMalformedEvent)
	}
	ev.Type = w.Type
	ev.SequenceNumber, ev.HasSeq = w.SequenceNumber.V, w.SequenceNumber.OK
	ev.Delta = w.Delta
	ev.Text = w.Text
	ev.ItemID = w.ItemID
	ev.OutputIndex = w.OutputIndex
	ev.Code, ev.Message, ev.Param = string(w.Code), w.Message, string(w.Param)
	if w.Type == EventError && w.Error.present {
		// {"type":"error","error":{...}}: some servers nest the details.
		if ev.Code == "" {
			ev.Code = string(w.Error.Code)
		}
		if ev.Message == "" {
			ev.Message = w.Error.Message
		}
		if ev.Param == "" {
			ev.Param = string(w.Error.Param)
		}
	}
	if w.Response != nil {
		ev.Response = w.Response.response()
	} else if status, ok := lifecycleStatus[w.Type]; ok {
		ev.Response = &Response{Status: status} // never nil on lifecycle events
	}
	if w.Item != nil {
		it := w.Item.item()
		ev.Item = &it
	} else if w.Type == EventOutputItemAdded || w.Type == EventOutputItemDone {
		ev.Item = &OutputItem{}
	}
	return nil
}

func eventLabel(name []byte, typ string) string {
	if typ != "" {
		return typ
	}
	if len(name) > 0 {
		return string(name)
	}
	return "event"
}

// lifecycleStatus is the status implied by a lifecycle event type, used when the
// event carries no response object, so that Event.Response is never nil on them.
var lifecycleStatus = map[string]string{
	EventCreated: "", EventQueued: StatusQueued, EventInProgress: StatusInProgress,
	EventCompleted: StatusCompleted, EventFailed: StatusFailed, EventIncomplete: StatusIncomplete,
	EventCancelled: StatusCancelled,
}

// knownEvent reports whether foundryq reads fields of this event type, in which
// case their types must be right.
func knownEvent(t string) bool {
	switch t {
	case EventCreated, EventQueued, EventInProgress, EventCompleted, EventFailed, EventIncomplete,
		EventCancelled, EventError, EventOutputTextDelta, EventOutputTextDone, EventOutputItemAdded,
		EventOutputItemDone, EventMCPCallInProgress, EventMCPCallCompleted, EventMCPCallFailed, EventRefusalDelta:
		return true
	}
	return false
}

// isDone reports the "[DONE]" sentinel some servers send as the last data.
func isDone(data []byte) bool {
	return bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]"))
}
