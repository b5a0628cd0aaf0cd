package conformance

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no case leaves a stream or an emulator behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startEmulator starts the emulator for one test.
func startEmulator(t *testing.T) *Emulator {
	t.Helper()
	emu, err := StartEmulator()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Close)
	return emu
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*CaseTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestEmulator runs every case on the emulator and asserts the observation
// the service's documentation describes (Case.Want, Case.Source): an
// emulator that stops behaving as the service does fails here.
func TestEmulator(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	ctx := ctxT(t)
	ran := 0
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			r := RunCase(ctx, emu.Endpoint, c)
			switch {
			case r.NotRun != "":
				if c.EndpointOnly == "" {
					t.Fatalf("not run on the emulator: %s", r.NotRun)
				}
				return
			case r.Err != nil:
				t.Fatal(r.Err)
			case r.Observed != c.Want:
				t.Errorf("the emulator gave\n\t%s\nthe service gives (%s)\n\t%s", r.Observed, c.Source, c.Want)
			}
			ran++
		})
	}
	if ran < 12 {
		t.Errorf("only %d cases ran on the emulator", ran)
	}
}

// TestConformance compares the emulator with the endpoint of
// FOUNDRYQ_CONFORMANCE_ENDPOINT (see the package doc and
// docs/conformance.md) and prints the table; a row that differs fails it.
// Without the endpoint there is nothing to compare with: it needs an Azure
// resource and its credentials (TestEmulator runs the emulator's side
// always).
func TestConformance(t *testing.T) {
	ep, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if ep == nil {
		t.Skipf("set %s, %s and %s (or an Entra ID login), and optionally %s, to compare the emulator with a real endpoint",
			EnvEndpoint, EnvModel, EnvAPIKey, EnvAgent)
	}
	emu := startEmulator(t)
	ctx := ctxT(t)
	rows := Compare(Run(ctx, emu.Endpoint, Cases), Run(ctx, ep, Cases))
	var b bytes.Buffer
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	os.Stdout.Write(b.Bytes())
	for _, r := range rows {
		if r.Verdict == Different || r.Verdict == NotCompared {
			t.Errorf("%s: %s (emulator: %s; endpoint: %s)", r.Behaviour, r.Verdict, r.Emulator, r.Endpoint)
		}
	}
}

// Every case runs against the emulator in well under CaseTimeout; the
// registry has no two cases of one name (the table pairs them by name),
// and each states its Want and Source.
func TestRegistry(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, c := range Cases {
		if c.Name == "" || c.Want == "" || c.Source == "" || c.Run == nil {
			t.Errorf("case %q: Name, Want, Source and Run are required", c.Name)
		}
		if seen[c.Name] {
			t.Errorf("two cases named %q", c.Name)
		}
		seen[c.Name] = true
		if c.EmulatorOnly != "" && c.EndpointOnly != "" {
			t.Errorf("case %q is both emulator-only and endpoint-only", c.Name)
		}
		if c.NeedsAgent && (c.EmulatorOnly != "" || c.EndpointOnly != "") {
			t.Errorf("case %q needs an agent on the endpoint but does not run on both", c.Name)
		}
		if strings.ContainsAny(c.Want, "\n|") {
			t.Errorf("case %q: Want must fit one table cell", c.Name)
		}
	}
}
