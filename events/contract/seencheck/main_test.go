package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events/contract"
	"github.com/foundryq/foundryq/events/schema"
	"github.com/foundryq/foundryq/internal/testkit"
)

// record writes, as a test process would, every schema property but skip.
func record(t *testing.T, skip string) string {
	t.Helper()
	set, err := contract.LoadFS(schema.FS(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rec := contract.NewRecorder(dir)
	for _, p := range set.Properties() {
		if p != skip {
			rec.Add(p)
		}
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func allowList(t *testing.T, lines ...string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "allow.txt")
	if err := os.WriteFile(name, []byte("# why each is here\n"+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestSeenCheck(t *testing.T) {
	const unseen = "event-run.failed.json#/properties/upstream_status"
	for _, tc := range []struct {
		name  string
		skip  string
		allow []string
		code  int
		want  string
	}{
		{"all seen", "", nil, 0, "schema properties seen"},
		{"one unseen", unseen, nil, 1, "never seen in the tests' traffic: " + unseen},
		{"unseen but allow-listed", unseen, []string{unseen + " # only when a run that asked times out"}, 0, "schema properties seen"},
		{"allow-listed by prefix", unseen, []string{"event-run.failed.json#/properties/ # a prefix"}, 0, "schema properties seen"},
		{"stale allow-list entry", "", []string{"run-state.json#/properties/no_such_field # gone"}, 1, "matches no schema property: run-state.json#/properties/no_such_field"},
		{"allow-list entry without a reason", unseen, []string{unseen}, 1, "has no reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut testkit.Buffer
			code := run([]string{"-dir", record(t, tc.skip), "-allow", allowList(t, tc.allow...)}, &out, &errOut)
			if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.want) {
				t.Fatalf("code %d (want %d), stdout %q, stderr %q; want %q", code, tc.code, out.String(), errOut.String(), tc.want)
			}
		})
	}
	var out, errOut testkit.Buffer
	if code := run([]string{"-dir", t.TempDir(), "-allow", allowList(t)}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "nothing recorded") {
		t.Errorf("an empty directory: code %d, stderr %q", code, errOut.String())
	}
}

// The repository's allow-list parses, and each entry names a property.
func TestAllowListOfTheRepository(t *testing.T) {
	allow, err := contract.ReadAllowList("../seen-allow.txt")
	if err != nil {
		t.Fatal(err)
	}
	set, err := contract.LoadFS(schema.FS(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, stale := contract.Unseen(set, map[string]bool{}, allow); len(stale) > 0 {
		t.Errorf("stale entries: %v", stale)
	}
}
