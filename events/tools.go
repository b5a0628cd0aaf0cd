package events

// Function tools served over NATS. A function tool named N may be served
// by a NATS service (a nats.go micro service) on <prefix>.tools.N: the
// worker then calls it itself instead of asking the run's caller. A
// request carries the call's arguments as its body and the headers below;
// the service may answer progress messages (HeaderToolStatus "working")
// before its one final answer (the output as the body, or micro's error
// headers). <prefix>.tools.cancel.<run_id>, with HeaderToolCallID, stops
// one call; every instance of every tool service listens there.

// kindTools is the subject token of the tool endpoints and of their
// cancel messages.
const kindTools = "tools"

// Headers of a tool call request and of its answers.
const (
	HeaderToolRunID    = "Foundryq-Run-Id"        // the run that calls
	HeaderToolCallID   = "Foundryq-Call-Id"       // the function_call's call_id (also on a cancel message)
	HeaderToolName     = "Foundryq-Tool"          // the tool's name
	HeaderToolDeadline = "Foundryq-Deadline"      // RFC 3339 with nanoseconds, UTC: when the worker gives the call up
	HeaderToolStatus   = "Foundryq-Tool-Status"   // on a progress message: ToolStatusWorking
	HeaderToolInstance = "Foundryq-Tool-Instance" // on the first progress message: the service instance's id
)

// ToolStatusWorking is HeaderToolStatus on a progress message: the call
// still runs.
const ToolStatusWorking = "working"

// ToolSubject is the service endpoint of function tool name:
// <prefix>.tools.<name>.
func (n Names) ToolSubject(name string) string { return n.subject(kindTools, name) }

// ToolCancelSubject is where the calls of run runID are stopped:
// <prefix>.tools.cancel.<run_id> (core NATS, header HeaderToolCallID).
func (n Names) ToolCancelSubject(runID string) string {
	return n.subject(kindTools, kindCancel+"."+runID)
}

// ToolCancelWildcard matches every ToolCancelSubject.
func (n Names) ToolCancelWildcard() string { return n.ToolCancelSubject("*") }
