package main

import (
	"context"
	"errors"
	"io"
	"regexp"
	"sort"
	"strings"
	"testing"
)

func TestCheckEndpoint(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		endpoint  string
		allowHTTP bool
		ok        bool
	}{
		{"https://res.openai.azure.com/openai/v1/", false, true},
		{"http://127.0.0.1:8089/openai/v1/", false, true},
		{"http://localhost:8089/openai/v1/", false, true},
		{"http://[::1]:8089/openai/v1/", false, true},
		{"http://emulator:8089/openai/v1/", false, false},
		{"http://emulator:8089/openai/v1/", true, true},
		{"http://10.0.0.5/openai/v1/", false, false},
		{"ftp://res.openai.azure.com/", true, false},
		{"res.openai.azure.com/openai/v1/", false, false},
	} {
		err := checkEndpoint(tt.endpoint, tt.allowHTTP)
		var usage usageError
		if (err == nil) != tt.ok || (err != nil && !errors.As(err, &usage)) {
			t.Errorf("checkEndpoint(%q, allowHTTP %v) = %v, want ok %v", tt.endpoint, tt.allowHTTP, err, tt.ok)
		}
	}
	if err := checkEndpoint("http://u:keySecret1@emulator/openai/v1/", false); err == nil || strings.Contains(err.Error(), "keySecret1") {
		t.Errorf("error shows the endpoint's password: %v", err)
	}
}

func TestKnownSecrets(t *testing.T) {
	t.Parallel()
	env := map[string]string{"NATS_URL": "nats://w:envpass1@h:4222", "FOUNDRY_API_KEY": "envkey1", "UNRELATED": "x",
		"FOUNDRYQ_CONFORMANCE_API_KEY": "envkey2"}
	got := knownSecrets([]string{"--nats-url", "nats://c:flagpass1@h", "--foundry-api-key=flagkey1", "--nats-password", "flagpass2", "--model", "m", "--", "notasecret"},
		func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	sort.Strings(got)
	want := []string{"envkey1", "envkey2", "envpass1", "flagkey1", "flagpass1", "flagpass2"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("knownSecrets = %v, want %v", got, want)
	}
}

func TestHelpShowsNoSecret(t *testing.T) {
	t.Setenv("NATS_PASSWORD", "helpSecret1")
	t.Setenv("FOUNDRY_API_KEY", "helpSecret2")
	t.Setenv("NATS_URL", "nats://client:helpSecret3@h:4222")
	for _, name := range []string{"worker", "submit", "dev"} {
		code, stdout, _ := runCmd(t, context.Background(), name, "--help")
		if code != 0 {
			t.Fatalf("%s --help: %d", name, code)
		}
		for _, s := range []string{"helpSecret1", "helpSecret2", "helpSecret3"} {
			if strings.Contains(stdout, s) {
				t.Errorf("%s --help shows %s", name, s)
			}
		}
		if !strings.Contains(stdout, "env NATS_PASSWORD (a secret: give it in the environment") {
			t.Errorf("%s --help does not mark --nats-password as a secret", name)
		}
	}
}

// Every setting a command declares as a secret (flags.Secret: --help marks
// it) is scrubbed from stderr, given as a flag or in the environment: a
// secret added later cannot be left out of secretSettings.
func TestEverySecretFlagIsScrubbed(t *testing.T) {
	t.Parallel()
	secretLine := regexp.MustCompile(`(?m)^  --(\S+) .*\n\s+env (\S+) \(a secret: `)
	found := 0
	for name := range commands {
		code, stdout, _ := runCmd(t, context.Background(), name, "--help")
		if code != 0 {
			t.Fatalf("%s --help: %d", name, code)
		}
		matches := secretLine.FindAllStringSubmatch(stdout, -1)
		if n := strings.Count(stdout, "(a secret: "); n != len(matches) {
			t.Fatalf("%s --help marks %d secrets, the pattern reads %d: it is out of date", name, n, len(matches))
		}
		for _, m := range matches {
			found++
			flag, env := m[1], m[2]
			got := knownSecrets([]string{"--" + flag, "flagSecret1", "--" + flag + "=flagSecret2"},
				func(k string) (string, bool) { return "envSecret1", k == env })
			sort.Strings(got)
			if want := "envSecret1 flagSecret1 flagSecret2"; strings.Join(got, " ") != want {
				t.Errorf("%s: secret --%s (%s) is scrubbed as %v, want %s (add it to secretSettings)", name, flag, env, got, want)
			}
		}
	}
	if found == 0 {
		t.Fatal("no command's --help marks a secret: the pattern is out of date")
	}
}

// Flags may follow the positional arguments; after "--" all is positional.
func TestFlagsAfterArguments(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		json bool
		pos  string
	}{
		{[]string{"r1", "--json"}, true, "r1"},
		{[]string{"--json", "r1"}, true, "r1"},
		{[]string{"r1"}, false, "r1"},
		{[]string{"r1", "--", "--json"}, false, "r1 --json"},
		{[]string{"--", "-x"}, false, "-x"},
		{[]string{"a", "--json", "b"}, true, "a b"},
	} {
		f := newFlags("x", "x")
		asJSON := f.Bool("json", "", false, "")
		if err := f.parse(c.args, io.Discard); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		var pos []string
		for i := range f.NArg() {
			pos = append(pos, f.Arg(i))
		}
		if *asJSON != c.json || strings.Join(pos, " ") != c.pos {
			t.Errorf("%v: json %v, positional %q; want %v, %q", c.args, *asJSON, pos, c.json, c.pos)
		}
	}
}
