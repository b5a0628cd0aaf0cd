package conformance

import (
	"context"
	"fmt"
	"time"
)

// Case is one behaviour of the service, observed the same way on any
// endpoint.
type Case struct {
	// Name is the behaviour, the first column of the table.
	Name string
	// Want is the observation the service's documentation (Source)
	// describes. The emulator run asserts it.
	Want string
	// Source is where Want comes from: a documentation page, SDK source or
	// public issue thread.
	Source string
	// EmulatorOnly, when set, is why the case is not run against a real
	// endpoint (it needs an emu_* directive or the emulator's clock, or it
	// cannot be triggered safely or without a person).
	EmulatorOnly string
	// EndpointOnly, when set, is why the case is not run against the
	// emulator (the emulator does not model it).
	EndpointOnly string
	// NeedsAgent, when set, makes the case run on a real endpoint only when
	// it names an agent (Config.Agent, EnvAgent): an agent run needs an
	// agent of the endpoint's project. The emulator knows every agent.
	NeedsAgent bool
	// Run observes the behaviour on e and returns a short string that the
	// same behaviour gives on every endpoint (no ids, no timings). An error
	// means the case could not observe anything (a network failure, a
	// reply it cannot read).
	Run func(ctx context.Context, e *Endpoint) (string, error)
}

// CaseTimeout bounds one case.
const CaseTimeout = 2 * time.Minute

// Cases is the registry: every behaviour the suite checks, in the order of
// the table. To add one, write a function observing it and append a Case
// with its documented Want and Source.
var Cases = []Case{
	caseCreate,
	caseStreamOrder,
	caseResume,
	caseRetrieve,
	caseNotFoundWindow,
	caseRequestIDs,
	caseObfuscation,
	caseKeepaliveMidStream,
	caseCancelRunning,
	caseCancelQueued,
	caseCancelCompleted,
	caseUnknownID,
	caseResumeWindow,
	caseMCPApproval,
	caseMCPApprovalFollowUp,
	caseFunctionFollowUp,
	caseFunctionOutputMissing,
	casePreviousUnknown,
	caseAgentInstructions,
	caseContentFilterStream,
	caseRefusal,
	caseErrorFirst,
	caseListToolsFailed,
	caseMaxOutputTooSmall,
	caseInputWrongType,
	caseBackgroundWithoutStore,
	caseUnknownModel,
	caseRateLimitHeaders,
	caseThrottled,
	caseShouldRetry,
}

// Result is what one case gave on one endpoint.
type Result struct {
	// Case is the case's Name.
	Case string
	// Observed is the observation; empty when the case did not run.
	Observed string
	// Err is why the case could not observe anything.
	Err error
	// NotRun, when set, is why the case was not run on this endpoint.
	NotRun string
}

// Applies reports whether c runs on e, and why not.
func (c Case) Applies(e *Endpoint) (bool, string) {
	switch {
	case e.emulator && c.EndpointOnly != "":
		return false, "endpoint only: " + c.EndpointOnly
	case !e.emulator && c.EmulatorOnly != "":
		return false, "emulator only: " + c.EmulatorOnly
	case c.NeedsAgent && e.agent == "":
		return false, "needs an agent: set " + EnvAgent + " to an agent of the project"
	}
	return true, ""
}

// RunCase runs one case on e with CaseTimeout.
func RunCase(ctx context.Context, e *Endpoint, c Case) Result {
	if ok, why := c.Applies(e); !ok {
		return Result{Case: c.Name, NotRun: why}
	}
	ctx, cancel := context.WithTimeout(ctx, CaseTimeout)
	defer cancel()
	obs, err := c.Run(ctx, e)
	if err != nil {
		return Result{Case: c.Name, Err: fmt.Errorf("%s on %s: %w", c.Name, e.name, err)}
	}
	return Result{Case: c.Name, Observed: obs}
}

// Run runs cases on e one after the other (the window cases move the
// emulator's clock, and a real endpoint is spared bursts) and returns one
// result per case, in order.
func Run(ctx context.Context, e *Endpoint, cases []Case) []Result {
	out := make([]Result, 0, len(cases))
	for _, c := range cases {
		out = append(out, RunCase(ctx, e, c))
	}
	return out
}
