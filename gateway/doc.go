// Package gateway is foundryq's HTTP face: an API and a web console over the
// events client, for browsers and for services that do not speak NATS.
//
//	POST /v1/runs                 submit a RunRequest (run_id optional; callback_url optional)
//	GET  /v1/runs/{id}            the run's state record (or "queued")
//	GET  /v1/runs                 the listing: status, since, limit
//	GET  /v1/runs/{id}/events     Server-Sent Events: id = seq, event = type, data = the RunEvent JSON;
//	                              Last-Event-ID or ?after=N resumes; ends after the terminal event
//	POST /v1/runs/{id}/cancel     200 with the CancelReply (cancelling: recorded; the outcome follows on the events)
//	GET  /healthz, GET /          health, and the console (embedded static files)
//
// A Gateway keeps no state between requests: any number of them serve the
// same tenants behind a load balancer. Each bearer token (stored as its
// SHA-256) maps to a Tenant, which has its own NATS connection: NATS
// accounts are the tenant boundary. Every refusal is a JSON ErrorBody.
//
// Event streams hold no JetStream consumer (see follower): they follow the
// run's event subject with a core subscription and read stored events with
// direct gets, so the number of open streams is not bounded by the server's
// consumer limit.
//
// Completion callbacks (CallbackConfig) are delivered by a notifier in the
// gateway process: registrations in the gateway's own KV bucket, a durable
// consumer on the state bucket's stream that queues a delivery when a run
// ends, durable senders that sign (with each tenant's own keys: SignV2 and
// Verifier; with the gateway-wide secret while it is set: Sign and
// VerifySignature), retry with backoff and dead-letter. A callback reaches
// no private, shared, link-local, unique-local or cloud-internal address,
// checked again after name resolution, unless the operator allows it.
//
// Every request passes guard first: the Host allow-list, CORS, the refusal
// of unsafe methods from other origins, and a deadline on its body; then
// per-token limits (requests per second, open event streams).
//
// Files: one concept each (gateway.go: Run and routing; runs.go,
// stream.go, follow.go, cancel.go: the endpoints; auth.go, tenant.go,
// guard.go, limits.go, cors.go, errors.go; callbacks.go, callbackaddr.go,
// notifier.go, signature.go; console.go and console/).
package gateway
