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
//	POST   /_emulator/throttle?for=D&retry_after=R answer every create 429 for D (GET: state, DELETE: end; no key)
//	POST   /_emulator/faults?cancel_fail_for=D&cancel_hang_for=D
//	                                              every cancel call answers 500, or hangs then answers 504, for D
//	                                              (both optional, at most 1h; GET: the open windows with left_ms,
//	                                              DELETE: close both; no key)
//
// The /openai/v1 routes are also served under the Foundry project form
// /api/projects/{project}/openai/v1 (Server.ProjectBaseURL). Other paths
// answer 404 and other methods on these paths 405, with the error body
// below; an api-version query parameter is accepted and ignored.
//
// With Config.APIKey set, the API routes need the "api-key" header or
// "Authorization: Bearer <key>"; otherwise 401. With Config.EntraKeys they
// also take an Entra ID bearer token (an RS256 JWT signed by one of the
// keys, unexpired, whose aud is https://cognitiveservices.azure.com under
// /openai/v1 and https://ai.azure.com under the project form); a refused
// token gets the Azure gateway's 401 {"statusCode":401,"message":
// "Unauthorized. Access token is missing, invalid, audience is incorrect
// (...), or have expired."}. NewAuthority starts a local token endpoint
// whose tokens these are, for azidentity. Errors use the real body shape
// {"error":{"message","type","param","code"}}, and Foundry's own 400s add
// "details".
//
// # Wire format
//
// SSE frames are "event: <type>\ndata: <json>\n\n"; every event has type
// and sequence_number, 0, 1, 2, … per response. A streamed create sends the
// 200 and its headers at once. A response emits, in order: keepalive events
// while response.created is held back (emu_created_ms); response.created,
// response.queued (background only), response.in_progress; for every MCP
// tool of the request an mcp_list_tools item (response.output_item.added,
// response.mcp_list_tools.in_progress, .completed,
// response.output_item.done); for a scripted tool call (emu_tool_ms) to the
// first mcp or function tool of the request: a function tool gives a
// function_call item (added, response.function_call_arguments.delta and
// .done, done) and the response completes there; an MCP tool whose
// require_approval is neither "never" nor a filter whose never list names
// the tool (the default is "always") gives
// an mcp_approval_request item (added, done) and the response completes
// there, with no call and no text (a follow-up create with
// previous_response_id answering it runs the approved call, or none, then
// the text: followup.go); otherwise (or with no tool in the
// request) response.output_item.added (mcp_call),
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
//   - Exactly one of "model" or "agent_reference" {type:"agent_reference",
//     name, version?} is required. The older name "agent" is refused with
//     400 invalid_payload "The 'agent' property is deprecated. Use
//     'agent_reference' instead." unless Config.AcceptDeprecatedAgentField.
//     With an agent, instructions, tools, text, reasoning, temperature and
//     top_p are refused: 400 invalid_payload "Not allowed when agent is
//     specified." naming the field (details []), or "Invalid payload" with
//     one details entry per field when there are several. An agent whose
//     name starts with HostedAgentPrefix ("hosted-"), or emu_hosted_agent=1,
//     is a hosted agent: background is dropped (background false, no
//     response.queued, the response lives on its connection), GET shows it
//     in_progress with no output for ever, resume answers 400 "Streaming is
//     not enabled for this response" and cancel "Cannot cancel a
//     synchronous response.". Unknown fields are ignored; known fields are
//     type-checked (400 invalid_type). max_output_tokens must be >= 16,
//     metadata at most 16 pairs, tools at most 128.
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
//     synchronous response." otherwise), 404 for unknown ids. A cancelled
//     response is returned unchanged (200, idempotent); a completed, failed
//     or incomplete one is refused with 400 invalid_request_error, param
//     response_id: "Cannot cancel a completed response.", "Cannot cancel a
//     failed response.", "Cannot cancel a response in terminal state.". It stops the generation
//     and any tool call in flight at once; the status becomes "cancelled"
//     with the usage so far. No further event is emitted and no terminal
//     event either (the protocol has no response.cancelled): streams end
//     cleanly after the last event already sent, and the client learns the
//     outcome from the cancel reply or GET. If the cancel arrives before
//     response.created went out (emu_created_ms), response.created is still
//     sent, after the keepalives, already carrying status "cancelled".
//   - Cancel faults: within an emu_cancel_fail_ms window, or a FailCancels
//     one (POST /_emulator/faults?cancel_fail_for=D), a cancel call
//     answers 500 server_error; within an emu_cancel_hang_ms window, or a
//     HangCancels one (?cancel_hang_for=D), it hangs until the window ends
//     or its client gives up, then answers 504 GatewayTimeout (a gateway
//     timing out: the call never reached the service). Neither cancels
//     anything. The process-wide windows apply to every cancel call,
//     unknown ids included; Close answers hanging calls at once.
//   - Throttle (or POST /_emulator/throttle) answers every create with 429
//     rate_limit_exceeded, Retry-After (whole seconds) and Retry-After-Ms,
//     and creates nothing, until it ends.
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
//	| emu_tool_ms | one tool call lasting this many ms before the text, to the first mcp or function tool of the request (server_label from it, name from its allowed_tools, else "emulator_tool"; with no such tool: label "emulator"); a function tool or an MCP tool needing approval ends the response with a function_call or mcp_approval_request item instead | no tool call |
//	| emu_tool_fail | 1: the tool call fails (response.mcp_call.failed, item status failed with an error object); the text follows | 0 |
//	| emu_function_calls | how many function_call items (1-8) a scripted call to a function tool ends the response with (parallel calls, to the request's function tools in turn) | 1 |
//	| emu_created_ms | pause before response.created; the 200 and the headers go out at once, keepalive events follow every emu_keepalive_ms; the response already exists server-side and can be cancelled by id | 0 |
//	| emu_keepalive_ms | interval of the keepalive events during emu_created_ms and emu_queued_ms (at most 1000 per response) | Config.KeepaliveInterval (30s) |
//	| emu_queued_ms | a background response stays queued this long after response.queued (up to 3600000, an hour: "stuck"): keepalive events every emu_keepalive_ms and no text, GET says queued, a cancel ends it (cancelled); then response.in_progress and the rest; ignored on a foreground response, which is never queued | 0 |
//	| emu_silent_after | after this many text tokens every stream of the response, the create's and any resumed one, goes silent: no frame at all (no keepalive either), connections kept open; the generation pauses (GET: in_progress, the text so far) until the response ends otherwise (cancel: cancelled, streams end cleanly; DELETE; Close) or emu_silent_ms ends; a value not below the number of tokens never applies | never |
//	| emu_silent_ms | with emu_silent_after: the silence lasts this long, then the generation resumes and the open streams carry on | until the response ends otherwise |
//	| emu_fail_after | after this many events, emit response.failed (error code emu_fail_code) and stop | never |
//	| emu_fail_code | the error code of emu_fail_after and emu_error_fail: server_error, rate_limit_exceeded, invalid_prompt, vector_store_timeout, bio_policy, invalid_image | server_error |
//	| emu_error_after | end the create stream with an "error" event (code server_error, numbered like the next event, not in the log) after this many events; the response goes on and can be fetched or resumed | never |
//	| emu_error_fail | 1 (with emu_error_after): the response fails at that point too (response.failed in the log, for resumers) | 0 |
//	| emu_get_404_ms | GET, resume and cancel of the response answer 404 for this long after creation | 0 |
//	| emu_hosted_agent | 1 (agent requests only): a hosted agent, see above; so is an agent named hosted-* | 0 |
//	| emu_drop_after | cut the create stream's connection after this many events (no final chunk: the client sees an unexpected EOF); a background response goes on and can be resumed, a foreground one ends at its next write | never |
//	| emu_create_status | answer the create with this HTTP status (400-599) and a real error body; 429 adds "Retry-After: 1" and "Retry-After-Ms: 1000"; no response is created | normal create |
//	| emu_create_status_times | with emu_create_status: only the first N creates of the run id (metadata.run_id) get that status, later ones are served: a transient 429 or 5xx that a retry clears (the OpenAI SDKs retry 429 and 5xx for this reason) | every create |
//	| emu_cancel_fail_ms | from the first cancel call received for the response, for this long, every cancel call answers 500 server_error (the service's error body) and cancels nothing: the generation goes on | 0 |
//	| emu_cancel_hang_ms | from the first cancel call received for the response, for this long, cancel calls hang with no answer until the window ends or the client gives up, then answer 504 (code GatewayTimeout, the gateway's message) and cancel nothing; with emu_cancel_fail_ms too, a hang wins | 0 |
//	| emu_complete_despite_cancel | 1: cancel answers "cancelled" but the generation goes on and the response ends "completed" (seen on Azure) | 0 |
//
// Invalid values get 400 naming the key. Generated text is deterministic:
// words picked by a hash of the model or agent, instructions, input and
// metadata, separated by spaces.
//
// Why each behaviour is the service's, with its source, is in the
// documentation of package foundry.
//
// # Stats
//
// Stats (Go value and GET /_emulator/stats) counts responses created (total
// and per metadata.run_id), cancels received, tokens generated after a
// cancel and after a client disconnect, tool calls completed after a cancel
// or a disconnect, tool calls aborted by a cancel, generations active now,
// streams open now, API requests by protocol (HTTP/1.x, HTTP/2) and every
// response's status. "After a disconnect" means
// while the response had no connected stream after one went away before the
// end (or, for a foreground response, the work done until the failing
// write). Record gives the same per response, with its cancel calls:
// cancel_calls (received), cancel_calls_max_in_flight (the most served at
// once: 1 when a client coalesces its cancels), cancel_calls_faulted,
// first_cancel_call_at and cancelled_at (the first call that actually
// cancelled it), and proto, the protocol its create came over.
//
// # HTTPS
//
// ListenTLS serves HTTPS, offering HTTP/2 and HTTP/1.1 by ALPN as Azure's
// endpoints do; ListenPlain adds a plain HTTP listener to the same
// emulator (`foundryq emulator --tls-cert F --tls-key K --plain-addr A`).
package foundrytest
