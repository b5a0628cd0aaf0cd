// Package tools serves a function tool over NATS, so that foundryq's
// workers call it themselves when a run's model calls the function,
// instead of pausing the run to ask the caller.
//
// A tool is a NATS service (nats.go's micro package) whose endpoint is
// <prefix>.tools.<name> (queue group "q": instances share the calls). The
// worker sends each call as a request there: the body is the call's
// arguments as the model wrote them (JSON text), the headers carry the run
// id, the call id, the tool's name and the worker's deadline
// (events.HeaderToolRunID, HeaderToolCallID, HeaderToolName,
// HeaderToolDeadline). Serve parses them into a Call and runs the Handler
// on a goroutine of its own; the handler's output is the reply, sent to
// the model as the function's output. While the handler runs, a progress
// message (header Foundryq-Tool-Status: working, empty body) goes to the
// worker every second (WithHeartbeat), so that the worker can tell a slow
// tool from a dead one.
//
// The handler's ctx ends when the worker cancels the call (a core NATS
// message on <prefix>.tools.cancel.<run_id> naming the call id: the run
// was cancelled, or the worker gave the call up), at the call's deadline,
// when the service stops, or when its connection closes;
// context.Cause(ctx) says which (ErrCancelled, ErrDeadline, ErrStopped,
// nats.ErrConnectionClosed). The reply is sent even then: nobody may read
// it, which is harmless.
//
// Error replies are micro errors (headers Nats-Service-Error and
// Nats-Service-Error-Code). Their codes:
//
//	400  the request lacks a valid Foundryq-Run-Id or a Foundryq-Call-Id, has a
//	     Foundryq-Deadline that is not RFC 3339, or a Foundryq-Tool naming another tool;
//	     the handler does not run
//	500  the handler returned an error (or panicked); an Error chooses its own code
//	503  the call did not start: the service was stopping, or the call was
//	     cancelled or past its deadline while it waited for a free slot
//	413  the output is larger than the server's max payload
//
// At most 64 calls run at once per Service (WithMaxInFlight); further
// calls wait for a free slot, each on a goroutine of its own, and a
// cancel or their deadline still ends them (answered 503 without running).
//
// nats micro ls, info and stats show each tool (service name = the tool's
// name, metadata foundryq_tool). The calls run on goroutines of their own,
// so micro's own num_errors and processing_time do not see them: the
// endpoint's stats data (Stats) counts them.
package tools
