package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/foundryq/foundryq/foundry/conformance"
)

// runConformance runs the conformance cases on the emulator (in process)
// and, when an endpoint is given, on it too, and prints the Markdown table
// of package conformance. The API key comes only from the environment
// (FOUNDRYQ_CONFORMANCE_API_KEY), never from a flag; without it the
// endpoint is reached with Entra ID (DefaultAzureCredential). It exits 1
// when a row differs or a case could not observe anything.
func runConformance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newFlags("conformance", "conformance [flags]\n\n"+
		"Runs the conformance cases on the emulator and, with --endpoint, on a real Azure OpenAI or Foundry endpoint\n"+
		"(a few hundred tokens), and prints the table. The endpoint's API key is read from "+conformance.EnvAPIKey+";\n"+
		"without it, Entra ID (DefaultAzureCredential) is used.")
	endpoint := f.String("endpoint", conformance.EnvEndpoint, "", "v1 base URL of the endpoint to compare with (empty: the emulator only)")
	model := f.String("model", conformance.EnvModel, "", "model deployment the cases use on the endpoint (required with --endpoint)")
	agent := f.String("agent", conformance.EnvAgent, "", "an agent of the endpoint's Foundry project, for the agent run case (refused before the agent runs: no token); empty: that case is not run on the endpoint")
	if err := f.parse(args, stdout); err != nil {
		return err
	}
	if err := needArgs(f, 0, "no arguments"); err != nil {
		return err
	}
	var ep *conformance.Endpoint
	if *endpoint != "" {
		var err error
		ep, err = conformance.New(conformance.Config{BaseURL: *endpoint, Model: *model, Agent: *agent, APIKey: os.Getenv(conformance.EnvAPIKey)})
		if err != nil {
			return usageError{err}
		}
	}
	emu, err := conformance.StartEmulator()
	if err != nil {
		return err
	}
	defer emu.Close()
	emuResults := conformance.Run(ctx, emu.Endpoint, conformance.Cases)
	var epResults []conformance.Result
	if ep != nil {
		epResults = conformance.Run(ctx, ep, conformance.Cases)
	}
	rows := conformance.Compare(emuResults, epResults)
	if err := conformance.WriteTable(stdout, rows); err != nil {
		return err
	}
	if ep == nil {
		fmt.Fprintf(stderr, "no endpoint: set %s and %s (and %s, or log in for Entra ID) to compare with Azure\n",
			conformance.EnvEndpoint, conformance.EnvModel, conformance.EnvAPIKey)
	}
	bad := 0
	for i, r := range rows {
		if r.Verdict == conformance.Different || r.Verdict == conformance.NotCompared || emuResults[i].Err != nil {
			bad++
		}
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "%d behaviour(s) differ or could not be observed: please report the table (docs/conformance.md)\n", bad)
		return exitCode(exitError)
	}
	return nil
}
