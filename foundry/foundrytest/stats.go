package foundrytest

import (
	"sync/atomic"
	"time"
)

// Stats counts what the emulator did, in particular the server-side work
// done after a client stopped caring: the figures foundryq exists to drive
// to zero. It is served as JSON at GET /_emulator/stats.
type Stats struct {
	// ResponsesCreated counts responses created (creates that got a response id).
	ResponsesCreated int64 `json:"responses_created"`
	// ResponsesByRun counts created responses per metadata.run_id.
	ResponsesByRun map[string]int64 `json:"responses_by_run"`
	// CreatesRejected counts creates answered with an error status
	// (validation, authentication excluded, or emu_create_status).
	CreatesRejected int64 `json:"creates_rejected"`
	// CreatesThrottled counts creates answered 429 by a Throttle (they are
	// counted in CreatesRejected too).
	CreatesThrottled int64 `json:"creates_throttled"`
	// CreatesOverQuota counts creates answered 429 because their
	// deployment's quota (Config.TokensPerMinute) was spent (they are
	// counted in CreatesRejected too).
	CreatesOverQuota int64 `json:"creates_over_quota"`
	// CancelsReceived counts POST /responses/{id}/cancel requests, whatever
	// their outcome.
	CancelsReceived int64 `json:"cancels_received"`
	// ResponsesCancelled counts responses a cancel moved to "cancelled".
	ResponsesCancelled int64 `json:"responses_cancelled"`
	// TokensGenerated counts every text token generated.
	TokensGenerated int64 `json:"tokens_generated"`
	// TokensAfterCancel counts tokens generated after a cancel was accepted
	// (only emu_complete_despite_cancel generates any).
	TokensAfterCancel int64 `json:"tokens_after_cancel"`
	// TokensAfterDisconnect counts tokens generated while the response had no
	// connected stream after one went away (client disconnect, write error or
	// emu_drop_after), and for a foreground response the token whose write
	// failed.
	TokensAfterDisconnect int64 `json:"tokens_after_disconnect"`
	// ToolCallsStarted counts MCP tool calls started.
	ToolCallsStarted int64 `json:"tool_calls_started"`
	// ToolCallsCompleted counts MCP tool calls that ran to their end
	// (including those that ended with emu_tool_fail).
	ToolCallsCompleted int64 `json:"tool_calls_completed"`
	// ToolCallsCompletedAfterCancel counts tool calls that ran to their end
	// after a cancel was accepted.
	ToolCallsCompletedAfterCancel int64 `json:"tool_calls_completed_after_cancel"`
	// ToolCallsCompletedAfterDisconnect counts tool calls that ran to their
	// end after the client went away (as for TokensAfterDisconnect).
	ToolCallsCompletedAfterDisconnect int64 `json:"tool_calls_completed_after_disconnect"`
	// ToolCallsAborted counts tool calls stopped in flight by a cancel.
	ToolCallsAborted int64 `json:"tool_calls_aborted"`
	// ActiveGenerations is the number of responses being generated now. A
	// generation stops counting when its goroutine has ended, a moment after
	// it emitted the final event.
	ActiveGenerations int64 `json:"active_generations"`
	// OpenStreams is the number of SSE streams being served now.
	OpenStreams int64 `json:"open_streams"`
	// PeakOpenStreams is the largest OpenStreams seen.
	PeakOpenStreams int64 `json:"peak_open_streams"`
	// RequestsHTTP1 and RequestsHTTP2 count the API requests (under
	// /openai/v1/ and /api/projects/{project}/openai/v1/, whatever their
	// answer) received over HTTP/1.x and over HTTP/2.
	RequestsHTTP1 int64 `json:"requests_http1"`
	RequestsHTTP2 int64 `json:"requests_http2"`
	// Statuses maps every response id held (not deleted) to its status.
	Statuses map[string]string `json:"statuses"`
}

// counters are the Handler's live counters.
type counters struct {
	created               atomic.Int64
	rejected              atomic.Int64
	throttled             atomic.Int64
	overQuota             atomic.Int64
	cancels               atomic.Int64
	cancelled             atomic.Int64
	tokens                atomic.Int64
	tokensAfterCancel     atomic.Int64
	tokensAfterDisconnect atomic.Int64
	toolStarted           atomic.Int64
	toolCompleted         atomic.Int64
	toolAfterCancel       atomic.Int64
	toolAfterDisconnect   atomic.Int64
	toolAborted           atomic.Int64
	active                atomic.Int64
	openStreams           atomic.Int64
	peakStreams           atomic.Int64
	requestsHTTP1         atomic.Int64
	requestsHTTP2         atomic.Int64
}

// streamOpened counts an SSE stream opened and keeps the peak.
func (c *counters) streamOpened() {
	n := c.openStreams.Add(1)
	for p := c.peakStreams.Load(); n > p && !c.peakStreams.CompareAndSwap(p, n); p = c.peakStreams.Load() {
	}
}

// ResponseRecord is the emulator's view of one response.
type ResponseRecord struct {
	// ID is the response id (resp_...).
	ID string `json:"id"`
	// RunID is metadata.run_id of the create request ("" if none).
	RunID string `json:"run_id,omitempty"`
	// PreviousResponseID is the create request's previous_response_id ("" if
	// none): the response this one continues.
	PreviousResponseID string `json:"previous_response_id,omitempty"`
	// Status is the current status, as GET would show it.
	Status string `json:"status"`
	// Proto is the protocol of the create request, as http.Request.Proto
	// has it: "HTTP/1.1", or "HTTP/2.0" (over TLS, negotiated by ALPN, or
	// without TLS by prior knowledge).
	Proto string `json:"proto"`
	// Background, Stream and Store echo the create request's flags.
	Background bool `json:"background"`
	Stream     bool `json:"stream"`
	Store      bool `json:"store"`
	// CreatedAt is when the create was accepted (created_at).
	CreatedAt time.Time `json:"created_at"`
	// FinishedAt is when the response reached its final status (zero if not).
	FinishedAt time.Time `json:"finished_at"`
	// CancelledAt is when the first cancel call that actually cancelled the
	// response was served (zero if none): a call answered with a fault
	// (emu_cancel_fail_ms, emu_cancel_hang_ms, FailCancels, HangCancels)
	// does not count.
	CancelledAt time.Time `json:"cancelled_at"`
	// DisconnectedAt is when a stream first went away before the end (zero if never).
	DisconnectedAt time.Time `json:"disconnected_at"`
	// Events is the number of stream events emitted so far.
	Events int `json:"events"`
	// Tokens is the number of text tokens generated so far (usage.output_tokens).
	Tokens int `json:"tokens"`
	// TokensAfterCancel and TokensAfterDisconnect are this response's share
	// of the Stats counters of the same name.
	TokensAfterCancel     int `json:"tokens_after_cancel"`
	TokensAfterDisconnect int `json:"tokens_after_disconnect"`
	// StreamsAttached is the number of SSE streams following it now.
	StreamsAttached int `json:"streams_attached"`
	// CancelCalls is the number of POST /responses/{id}/cancel calls
	// received for it, whatever their answer (404s of emu_get_404_ms and
	// faults included).
	CancelCalls int `json:"cancel_calls"`
	// CancelCallsMaxInFlight is the largest number of its cancel calls that
	// were being served at once: 1 when a client never overlaps them.
	CancelCallsMaxInFlight int `json:"cancel_calls_max_in_flight"`
	// CancelCallsFaulted is the number of its cancel calls answered by a
	// fault (500 or 504), which cancelled nothing.
	CancelCallsFaulted int `json:"cancel_calls_faulted"`
	// FirstCancelCallAt is when its first cancel call was received (zero if
	// none): the start of the emu_cancel_fail_ms and emu_cancel_hang_ms
	// windows.
	FirstCancelCallAt time.Time `json:"first_cancel_call_at"`
	// Text is the output text emitted so far (the concatenated deltas).
	Text string `json:"text"`
	// TokenTimes holds, with Config.RecordTimes, when each text token was
	// generated, in Unix nanoseconds (a token generated while a foreground
	// client's write fails is included, as in Tokens).
	TokenTimes []int64 `json:"token_times,omitempty"`
	// TokenEnds holds, with Config.RecordTimes, the length in bytes of the
	// output text once token i is appended: a reader that has received n
	// bytes of text has received every token whose end is at most n.
	TokenEnds []int `json:"token_ends,omitempty"`
	// ToolCalls holds, with Config.RecordTimes, the MCP tool calls started.
	ToolCalls []ToolCallRecord `json:"tool_calls,omitempty"`
}

// ToolCallRecord is one MCP tool call of a response (Config.RecordTimes).
type ToolCallRecord struct {
	// StartedAt is when the call started (its arguments were done).
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is when the call ran to its end; zero if it was aborted
	// (by a cancel) or is still running.
	FinishedAt time.Time `json:"finished_at"`
}
