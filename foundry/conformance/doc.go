// Package conformance checks that foundrytest's emulator behaves as the
// Responses API of Azure OpenAI and Azure AI Foundry does, by running the
// same behaviour cases against both and comparing what each observed.
//
// Each Case observes one behaviour (create, the stream's framing, resume
// with starting_after, retrieve, the 404 window after a streamed create,
// request ids, obfuscation, keepalives, cancel in each state, unknown ids,
// the resume window, MCP approval requests, follow-ups with
// previous_response_id, agent runs' refusals, the ways a response fails,
// error objects, throttling headers) over raw HTTP, authenticated as
// package foundry authenticates (an api-key header, or an Entra ID token
// for the scope foundry picks), and returns a short string: what the
// behaviour looked like, with no ids or timings, so that the emulator's and
// an endpoint's can be compared. Each case also states the observation the
// service's documentation describes (Want) and where it says so (Source);
// the package's tests assert it against the emulator, so a regression of
// the emulator fails them.
//
// Some cases run only on the emulator (they need an emu_* directive or the
// emulator's clock, or cannot be triggered on the service safely or
// without a person); a few run only on an endpoint (the emulator does not
// model them). Case.EmulatorOnly and Case.EndpointOnly say why. A case
// with Case.NeedsAgent runs on an endpoint only when it names an agent.
//
// Against a real endpoint the cases create fourteen small responses (a
// prompt answered in a word or a call of a function without arguments,
// max_output_tokens 16): a few hundred tokens in all.
// Set FOUNDRYQ_CONFORMANCE_ENDPOINT, FOUNDRYQ_CONFORMANCE_MODEL and either
// FOUNDRYQ_CONFORMANCE_API_KEY or an Entra ID login that
// azidentity.DefaultAzureCredential finds (and, for the agent run case,
// FOUNDRYQ_CONFORMANCE_AGENT: an agent of the project), then run
//
//	go test -run TestConformance -v ./foundry/conformance/
//
// or `foundryq conformance`; both print the table of Compare as Markdown
// (WriteTable).
//
// To add a case: write a function that observes the behaviour, declare a
// Case with its documented Want and Source, and append it to Cases.
package conformance
