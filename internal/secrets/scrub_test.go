package secrets_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/foundryq/foundryq/internal/secrets"
)

func TestScrub(t *testing.T) {
	t.Parallel()
	s := secrets.Scrub(`parse "nats://client:pa ss!word@h": x; again pa+ss%21word and pa%20ss%21word; short abc`, "pa ss!word", "abc", "")
	if s != `parse "nats://client:REDACTED@h": x; again REDACTED and REDACTED; short abc` {
		t.Fatalf("Scrub = %q", s)
	}
}

func TestScrubError(t *testing.T) {
	t.Parallel()
	base := errors.New("dial: password hunter22 refused")
	err := secrets.ScrubError(fmt.Errorf("connect: %w", base), "hunter22")
	if err.Error() != "connect: dial: password REDACTED refused" || !errors.Is(err, base) {
		t.Fatalf("ScrubError = %q (Is base: %v)", err, errors.Is(err, base))
	}
	if secrets.ScrubError(nil, "x") != nil {
		t.Fatal("nil error became non-nil")
	}
	if e := errors.New("clean"); secrets.ScrubError(e, "hunter22") != e {
		t.Fatal("an error without secrets was wrapped")
	}
}

func TestWriter(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := secrets.NewWriter(&buf, "first-secret")
	w.Add("second-secret")
	line := "a first-secret b second-secret c\n"
	n, err := io.WriteString(w, line)
	if err != nil || n != len(line) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if buf.String() != "a REDACTED b REDACTED c\n" {
		t.Fatalf("wrote %q", buf.String())
	}
}

func TestScrubURLs(t *testing.T) {
	t.Parallel()
	list := "nats://client:pw@ho st:4222,nats://tk@h2"
	in := `parse "nats://client:pw@ho st:4222": invalid; then pw alone, tk alone, and pwd or tkx in words`
	want := `parse "nats://REDACTED@ho st:4222": invalid; then REDACTED alone, REDACTED alone, and pwd or tkx in words`
	if got := secrets.ScrubURLs(in, list); got != want {
		t.Fatalf("ScrubURLs =\n%q\nwant\n%q", got, want)
	}
	base := errors.New(in)
	if err := secrets.ScrubURLsError(base, list); err.Error() != want || !errors.Is(err, base) {
		t.Fatalf("ScrubURLsError = %v", err)
	}
}
