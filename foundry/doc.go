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
package foundry
