package conformance

import (
	"errors"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	t.Parallel()
	emu := []Result{
		{Case: "a", Observed: "200 x"},
		{Case: "b", Observed: "200 x"},
		{Case: "c", Observed: "400 y"},
		{Case: "d", NotRun: "endpoint only: not modelled"},
		{Case: "e", Err: errors.New("boom")},
		{Case: "f", Observed: "z"},
	}
	ep := []Result{
		{Case: "a", Observed: "200 x"},
		{Case: "b", Observed: "200 other"},
		{Case: "c", NotRun: "emulator only: a directive"},
		{Case: "d", Observed: "404 q"},
		{Case: "e", Observed: "ok"},
		// f: not run at all
	}
	want := map[string]string{"a": Same, "b": Different, "c": EmulatorOnly, "d": EndpointOnly, "e": NotCompared, "f": NoEndpoint}
	rows := Compare(emu, ep)
	if len(rows) != len(emu) {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.Verdict != want[r.Behaviour] {
			t.Errorf("%s: %s, want %s", r.Behaviour, r.Verdict, want[r.Behaviour])
		}
	}
	if rows[4].Emulator != "error: boom" || rows[3].Emulator != "— (endpoint only: not modelled)" || rows[5].Endpoint != "not run" {
		t.Errorf("cells: %+v", rows)
	}
	// Without an endpoint every row is the emulator's alone.
	for _, r := range Compare(emu[:1], nil) {
		if r.Verdict != NoEndpoint || r.Endpoint != "not run" {
			t.Errorf("no endpoint: %+v", r)
		}
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	err := WriteTable(&b, []Row{{Behaviour: "a|b", Emulator: "line\nbreak", Endpoint: "x", Verdict: Same}})
	if err != nil {
		t.Fatal(err)
	}
	want := "| behaviour | emulator | endpoint | same/different |\n|---|---|---|---|\n| a\\|b | line break | x | same |\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestErrorObs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		status  int
		body    string
		message bool
		want    string
	}{
		{"full", 400, `{"error":{"message":"m.","type":"invalid_request_error","param":"input","code":"invalid_type"}}`, false, "400 invalid_request_error code=invalid_type param=input"},
		{"nulls", 404, `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":null}}`, false, "404 invalid_request_error"},
		{"numeric code", 401, `{"error":{"message":"m","type":"","code":401}}`, false, "401  code=401"},
		{"message", 400, `{"error":{"message":"Cannot cancel a completed response.","type":"invalid_request_error","param":"x"}}`, true, `400 invalid_request_error "Cannot cancel a completed response"`},
		{"gateway", 401, `{"statusCode":401,"message":"Unauthorized. Access token is missing."}`, false, "401 gateway: Unauthorized. Access token is missing"},
		{"not JSON", 502, `<html>bad gateway</html>`, false, "502 (not an error object)"},
		{"other JSON", 500, `{"detail":"x"}`, false, "500 (not an error object)"},
		{"empty", 503, ``, false, "503 (empty body)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorObs(tt.status, []byte(tt.body), tt.message); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
