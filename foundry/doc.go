// Package foundry is foundryq's client for the Responses API of Azure AI Foundry
// and Azure OpenAI (v1 endpoints). It starts background + streaming responses,
// re-attaches to their streams, cancels them on the server and fetches them.
//
// # Endpoints and authentication
//
// Config.BaseURL is a v1 base URL, either an Azure OpenAI resource
// (https://RES.openai.azure.com/openai/v1/) or a Foundry project endpoint
// (https://RES.services.ai.azure.com/api/projects/PROJECT/openai/v1/); requests
// go to {base}/responses... With Config.APIKey the key is sent in the "api-key"
// header. Without one, an Entra ID token from Config.Credential (default
// azidentity.NewDefaultAzureCredential) is sent as "Authorization: Bearer", for
// the scope https://ai.azure.com/.default on project endpoints (a path
// .../api/projects/PROJECT/openai/v1) and
// https://cognitiveservices.azure.com/.default otherwise (Config.Scope
// overrides). Tokens are cached and renewed five minutes before they expire.
//
// # The openai-go pitfalls this package handles
//
// Every request carries the W3C trace context (traceparent, tracestate,
// baggage) of its context's span, if any, so that Foundry's side joins the
// caller's trace; the client makes no spans itself (foundryq's worker wraps
// each call in one).
//
// Requests go through github.com/openai/openai-go/v3 (base URL, middleware,
// retries of idempotent calls), with these corrections:
//
//   - The azure helper package builds legacy /openai/... paths; the base URL is
//     set directly and authentication is a middleware.
//   - openai.NewClient reads OPENAI_* environment variables; every option is
//     explicit and the middleware strips ambient credentials.
//   - The SDK retries POST /responses on 5xx, 429 and connection errors with no
//     idempotency key, which can start duplicate billed background runs: Create
//     is sent exactly once.
//   - Responses.GetStreaming sends stream=true in a GET body (openai/openai-go#660),
//     so the server answers with JSON: Resume puts it in the query, and a reply
//     that is not text/event-stream is an error (ErrNotStreaming), never an empty
//     stream.
//   - The SDK's stream ends with a nil error when the connection closes before a
//     terminal event: Stream reports ErrStreamTruncated instead and keeps the
//     last sequence number for Resume.
//   - openai.Error's message carries only the status: APIError keeps the
//     server's code and message and matches sentinels (ErrNotFound,
//     ErrResumeExpired, ErrNotBackground, ErrRateLimited, ...) with errors.Is.
//
// # Streams
//
// The SSE body is read by this package rather than by openai-go's ssestream,
// and each event is decoded into the small Event struct. On a
// response.output_text.delta, SSE framing plus decode costs 336 B in 8
// allocations against 13 KB in 45 for ssestream with
// responses.ResponseStreamEventUnion, and runs 5-7x faster
// (go test -run '^$' -bench DecodeDelta ./foundry/). A Stream ends after its terminal event
// (response.completed, response.failed, response.incomplete or error); its Err
// says why it ended otherwise. Closing a stream does not cancel the response:
// background responses run on until Cancel.
//
// # How the service behaves, and how the emulator reproduces it
//
// Nothing in foundryq's tests reaches Azure: foundry/foundrytest is the only
// instrument, and it answers as the service does by default. Where the
// behaviour depends on load or on the account, a metadata key (emu_*) or a
// foundrytest.Config setting turns it on. Each behaviour, its source (page or
// thread title) and what this package offers for it:
//
//   - Agent runs refuse instructions, tools, text, reasoning, temperature and
//     top_p: 400 invalid_payload "Not allowed when agent is specified." with
//     param naming the field and details [] ("400 invalid_payload when
//     passing [tools] with an agent reference", microsoft/agent-framework
//     #5130); several fields give "Invalid payload" with one details entry
//     each ("temperature and top_p not valid params", microsoft/agent-framework
//     #2573). Emulator: by default. events.RunRequest.Validate refuses such
//     runs before Foundry is called (events.ErrAgentConflict).
//   - The old "agent" request field is refused: 400 invalid_payload "The
//     'agent' property is deprecated. Use 'agent_reference' instead." ("Update
//     responses.create payload to use agent_reference",
//     MicrosoftLearning/mslearn-ai-agents #157, #193). Emulator: by default;
//     foundrytest.Config.AcceptDeprecatedAgentField (foundryq emulator
//     --emulator-accept-agent-field) emulates a service that takes the name
//     Config.AgentField is set to.
//   - Error bodies carry details[{message, param}] ("BadRequestError (400)
//     from Responses API when agents invoke MCP tools",
//     microsoft/agent-framework #4576): APIError.Details, also in its Error
//     text. Emulator: on its invalid_payload answers.
//   - An MCP call needs approval unless require_approval is "never" (the
//     default is "always"): the response completes with an
//     mcp_approval_request item and no call and no text (Microsoft Learn,
//     "Azure OpenAI Responses API", MCP approvals; OpenAI "Remote MCP"
//     guide). Every MCP server of a request first gets an mcp_list_tools item
//     (output_item.added, response.mcp_list_tools.in_progress and
//     .completed, output_item.done); an approval request has only
//     output_item.added and .done (Azure.AI.AgentServer.Responses,
//     "ResponseEventStream.OutputItemMcpApprovalRequest"). A function tool
//     call ends the response with a function_call item. Emulator: by default
//     for the scripted call (emu_tool_ms) to the first mcp or function tool.
//     Response.ApprovalRequests and Response.FunctionCalls find them in a
//     finished response.
//   - Hosted agents ignore background: response.created says background
//     false, resume answers 400 "Streaming is not enabled for this response",
//     GET stays in_progress with no output, cancel fails ("azure-ai-agentserver:
//     Support background mode and resumable streaming for hosted agents",
//     Azure/azure-sdk-for-python #46015). Response.Background and
//     BackgroundKnown, ErrStreamingNotEnabled. Emulator: an agent name
//     starting with foundrytest.HostedAgentPrefix ("hosted-"), or
//     emu_hosted_agent=1; the cancel answers "Cannot cancel a synchronous
//     response.".
//   - Cancel of a finished response is 400 invalid_request_error "Cannot
//     cancel a completed response." ("bound the background stream cancel e2e
//     so an upstream stall skips fast", BerriAI/litellm #39617, from a live
//     run); failed and incomplete ones are refused too ("Cannot cancel a
//     failed response.", "Cannot cancel a response in terminal state.",
//     azure-ai-agentserver-responses _CANCEL_TERMINAL_ERRORS); only a
//     cancelled one answers 200 with the response (Microsoft Learn,
//     "Azure OpenAI Responses API": cancelling is idempotent). Cancel then
//     falls back to GET and returns the finished response. Emulator: by
//     default.
//   - response.created can come minutes after the headers, with
//     {"type":"keepalive","sequence_number":N} events meanwhile, about every
//     30 s (BerriAI/litellm #39617; "v6.45.0 can't handle stream keepalive
//     events", openai/openai-node #1964; "handle response stream keepalive
//     events", openai/openai-java #776). Keepalives pass through as
//     EventKeepalive and do not move LastSeq. Emulator: emu_created_ms sends
//     the 200 and headers at once, then keepalives every emu_keepalive_ms
//     (Config.KeepaliveInterval, default 30s).
//   - GET right after a streamed create can answer 404 for up to ~33 s on
//     Azure /openai/v1 ("Intermittent 400 previous_response_not_found when
//     chaining Responses API turns", dotnet/extensions #7704, 79 samples):
//     NotYetVisible and NotFoundGrace. Emulator: emu_get_404_ms makes GET,
//     resume and cancel answer 404 that long after creation.
//   - An "error" event in a background stream does not say the response
//     stopped (BerriAI/litellm #39617): the stream ends there (Terminal, no
//     Err); GET the response and resume or poll. The error event does not
//     move LastSeq. Emulator: emu_error_after=N ends the create stream with
//     an error event after N events while the response goes on;
//     emu_error_fail=1 makes it fail there too.
//   - A failed response's error.code may be transient (rate_limit_exceeded,
//     server_error) or not (OpenAI API reference, the response object's
//     error.code; openai-go v3.98.0 ResponseErrorCode):
//     ResponseError.Retryable, TransientResponseCodes. Emulator:
//     emu_fail_code chooses the code of emu_fail_after or emu_error_fail.
//   - 429 (and 5xx) come with retry-after and retry-after-ms (Microsoft
//     Learn, "Azure OpenAI 429: token and request rate limits explained");
//     Azure's Responses API has also answered without them, with
//     x-ratelimit-reset-* headers ("Azure OpenAI Responses API x-ratelimit
//     headers values -1, 0", Microsoft Q&A): APIError.RetryAfter reads all of
//     them. Emulator: Server.Throttle / Handler.Throttle, or POST
//     /_emulator/throttle?for=D&retry_after=R (foundryq emulator exposes it),
//     answer every create 429 for D; emu_create_status=429 answers one.
//   - Entra ID: tokens for https://cognitiveservices.azure.com on resource
//     endpoints, https://ai.azure.com on project endpoints (Microsoft Learn,
//     Azure OpenAI "Responses API" troubleshooting; Foundry quickstart);
//     otherwise the gateway answers 401 {"statusCode":401,"message":
//     "Unauthorized. Access token is missing, invalid, audience is incorrect
//     (...), or have expired."} (Azure-Samples/azure-search-openai-demo
//     #458). A failure to get a token, a 401 and a 403 match ErrAuth and are
//     not retried like network errors. Emulator: Config.EntraKeys checks
//     RS256 tokens (audience per endpoint form: /openai/v1/ or
//     /api/projects/{project}/openai/v1/, exp, nbf); foundrytest.Authority
//     is a local token endpoint that azidentity uses through its own options.
//   - A background, streamed response can stay queued for 10 minutes and
//     more, or go silent mid-stream (no frame, the connection open), after
//     a near-instant client disconnect ("Background: true, stream: true
//     Response can be stuck in queued after a near-instant client
//     disconnect", OpenAI developer community). Config.StreamIdleTimeout
//     ends a stream that receives nothing (keepalives count) for that long
//     with ErrStreamIdle; response.queued and response.in_progress carry
//     the status in Event.Response (StatusQueued, StatusInProgress).
//     Emulator: emu_queued_ms keeps a response queued with keepalives;
//     emu_silent_after=N silences its streams after N tokens
//     (emu_silent_ms: for that long).
//   - A response reported cancelled can later turn completed (Microsoft Q&A
//     2339607). Emulator: emu_complete_despite_cancel=1.
//   - A create naming a deployment the resource does not have is answered
//     404 {"error": {"code": "DeploymentNotFound", "message": "The API
//     deployment for this resource does not exist..."}}
//     (MicrosoftDocs/azure-docs #114013); it matches ErrDeploymentNotFound.
//     Emulator: emu_create_status=404.
//   - Failures after which nothing reached the server and a retry will not
//     help are told apart from network errors: a host name that does not
//     resolve (*net.DNSError with IsNotFound) wraps ErrHostNotFound, a
//     server certificate that cannot be verified ErrTLSVerification.
//     Client.Check makes one authenticated GET of a response id that does
//     not exist (404 expected) to test endpoint and credential at start.
package foundry
