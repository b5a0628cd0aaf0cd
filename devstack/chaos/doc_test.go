// Package chaos checks foundryq's promises under faults: every run ends
// with exactly one terminal event, its events have contiguous seqs, the
// text relayed is the text Foundry generated (no token lost, none
// repeated), each run has at most one upstream response, no token or
// tool call is generated after a cancel was acknowledged, a cancelled run
// whose response ran on upstream says so (upstream_status), a run with a
// timeout ends, and its response is cancelled upstream, within a bound of
// its deadline, runs start in priority order (within a tolerance), and no
// capped fairness key has more runs running than its cap.
//
// The Auditor reads what a test left behind (every event stored on the
// events stream, the runs' state records, the Foundry emulator's
// per-response records and counters) and returns a Report, printed as a
// table. Two tests drive it:
//
//   - TestClusterLeaderLoss (runs by default): at least 100 streaming runs
//     with two workers on a three-node JetStream cluster with R3 streams
//     and bucket, killing the leader of the events stream, then those of
//     the runs stream and of the state bucket, mid-stream; watchers that
//     follow the runs must see no gap and no duplicate.
//   - TestChaos (FOUNDRYQ_CHAOS=short, about a minute, or long): foundryq
//     worker processes are SIGKILLed, SIGSTOPped past their lease and
//     SIGCONTed, SIGTERMed (hand-offs), one is cut off from NATS through a
//     black-holing Proxy, NATS is restarted, its store is filled and
//     freed, the emulator answers creates with 429 and 5xx, cuts streams,
//     holds creates back, stalls, fails and hangs cancels, and clients
//     cancel runs at random moments; some runs have a short timeout. The
//     runs mix fairness keys and priorities, one key floods the queue in
//     bursts, and two keys are capped.
//     Without FOUNDRYQ_CHAOS it skips. TestCancelPastAFrozenWorker runs
//     with it: a worker process frozen with SIGSTOP does not hold a
//     cancel up.
//
// The package is test code only: every file is a _test.go file (the
// auditor, its report, the token diff and the proxy included), since
// nothing outside these tests uses it. Run it with
//
//	FOUNDRYQ_CHAOS=short go test -race -count=1 -v -run '^(TestChaos|TestCancelPastAFrozenWorker)$' ./devstack/chaos/
package chaos
