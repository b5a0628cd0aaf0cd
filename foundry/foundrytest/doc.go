// Package foundrytest is an in-process emulator of the Azure AI Foundry /
// OpenAI Responses API (v1 paths), in the spirit of net/http/httptest. Every
// foundryq test, the dev mode, the demo and the benchmarks run against it,
// and it counts the server-side work done after a client went away.
//
//	srv := foundrytest.NewServer(foundrytest.Config{APIKey: "k"})
//	defer srv.Close()
//	// point a client at srv.BaseURL() ("http://127.0.0.1:PORT/openai/v1/")
//
// NewHandler returns the same emulator as an http.Handler for standalone
// serving (`foundryq emulator --addr 127.0.0.1:8089`).
//
// # Routes
//
//	POST   /openai/v1/responses                   create (JSON, or SSE when "stream": true)
//	GET    /openai/v1/responses/{id}              the stored object (JSON)
//	GET    /openai/v1/responses/{id}?stream=true&starting_after=N
//	                                              SSE: the events after N, then live ones to the end
//	POST   /openai/v1/responses/{id}/cancel       cancel a background response
//	DELETE /openai/v1/responses/{id}              forget a response (stops its generation)
//	GET    /_emulator/stats                       Stats as JSON (no key needed)
//
// Other paths answer 404 and other methods on these paths 405, with the
// error body below; an api-version query parameter is accepted and ignored.
//
// With Config.APIKey set, /openai/ routes need the "api-key" header or
// "Authorization: Bearer <key>"; otherwise 401. Errors use the real body
// shape {"error":{"message","type","param","code"}}.
//
// # Wire format
//
// SSE frames are "event: <type>\ndata: <json>\n\n"; every event has type
// and sequence_number, 0, 1, 2, … per response. A response emits, in order:
// response.created, response.queued (background only), response.in_progress;
// for a tool call response.output_item.added (mcp_call),
// response.mcp_call.in_progress, response.mcp_call_arguments.delta and .done,
// response.mcp_call.completed or .failed, response.output_item.done; then the
// message: response.output_item.added, response.content_part.added,
// response.output_text.delta (one per token), response.output_text.done,
// response.content_part.done, response.output_item.done; and finally one of
// response.completed, response.incomplete (max_output_tokens reached:
// incomplete_details.reason "max_output_tokens") or response.failed, whose
// response carries usage. The stored object (GET) has the final status,
// output (its text is the concatenation of the deltas), usage, metadata,
// background and model, or the agent_reference echoed.
//
// # Semantics
//
//   - Exactly one of "model" or "agent_reference" (also "agent", the older
//     preview name) {type:"agent_reference", name, version?} is required.
//     Unknown fields are ignored; known fields are type-checked (400
//     invalid_type). max_output_tokens must be >= 16, metadata at most 16
//     pairs.
//   - background:true needs store:true (400 otherwise). A background
//     response is generated on the server whether or not a client is
//     connected. A store:false response cannot be retrieved (404).
//   - Resume (GET ?stream=true&starting_after=N) replays exactly the events
//     with sequence_number > N, then follows live until the terminal event.
//     It answers 400 for a non-background response ("This response cannot
//     be streamed because it was not created with background=true."), for a
//     background response created without stream:true, and once the
//     response is older than Config.ResumeWindow (default 5m, measured from
//     created_at: "This response can no longer be streamed because it is
//     more than 5 minutes old.").
//   - Cancel works only on background responses (400 "Cannot cancel a
//     synchronous response." otherwise), 404 for unknown ids, and returns a
//     response already final unchanged (idempotent). It stops the generation
//     and any tool call in flight at once; the status becomes "cancelled"
//     with the usage so far. No further event is emitted and no terminal
//     event either (the protocol has no response.cancelled): streams end
//     cleanly after the last event already sent, and the client learns the
//     outcome from the cancel reply or GET. If the cancel arrives before
//     response.created went out (emu_created_ms), response.created is still
//     sent, already carrying status "cancelled".
//   - A foreground (background:false) response lives on its connection: when
//     its client goes away, a tool call in flight runs to completion and the
//     generation goes on until its next write, which fails (that token is
//     generated and counted); the response then ends with status
//     "cancelled" and no terminal event. This also applies when
//     emu_drop_after cuts a foreground stream.
//   - DELETE stops a response still generating and forgets it.
//
// # Scenario metadata keys
//
// Each create request scripts its response through metadata (string values):
//
//	| key | meaning | default |
//	|---|---|---|
//	| emu_tokens | number of text tokens (response.output_text.delta events) to generate | Config.DefaultTokens (20) |
//	| emu_token_ms | pause before each token (so also before the first), in ms | Config.DefaultTokenDelay (0) |
//	| emu_tool_ms | one MCP tool call lasting this many ms before the text; server_label from the first "type":"mcp" tool of the request (else "emulator"), name from its allowed_tools (else "emulator_tool") | no tool call |
//	| emu_tool_fail | 1: the tool call fails (response.mcp_call.failed, item status failed with an error object); the text follows | 0 |
//	| emu_created_ms | pause before the first event (response.created); the response already exists server-side and can be cancelled by id; the create's HTTP headers are held back until then | 0 |
//	| emu_fail_after | after this many events, emit response.failed (error code server_error) and stop | never |
//	| emu_drop_after | cut the create stream's connection after this many events (no final chunk: the client sees an unexpected EOF); a background response goes on and can be resumed, a foreground one ends at its next write | never |
//	| emu_create_status | answer the create with this HTTP status (400-599) and a real error body; 429 adds "Retry-After: 1"; no response is created | normal create |
//	| emu_complete_despite_cancel | 1: cancel answers "cancelled" but the generation goes on and the response ends "completed" (seen on Azure) | 0 |
//
// Invalid values get 400 naming the key. Generated text is deterministic:
// words picked by a hash of the model or agent, instructions, input and
// metadata, separated by spaces.
//
// # Stats
//
// Stats (Go value and GET /_emulator/stats) counts responses created (total
// and per metadata.run_id), cancels received, tokens generated after a
// cancel and after a client disconnect, tool calls completed after a cancel
// or a disconnect, tool calls aborted by a cancel, generations active now,
// streams open now and every response's status. "After a disconnect" means
// while the response had no connected stream after one went away before the
// end (or, for a foreground response, the work done until the failing
// write). Record gives the same per response.
package foundrytest
