package secrets

import (
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// MinScrubLen is the shortest value Scrub replaces: shorter strings are
// too short to be credentials worth the name, and replacing them would
// garble ordinary words.
const MinScrubLen = 6

// Scrub returns s with every occurrence of each secret (and its URL-escaped
// forms) replaced by Redacted. Empty secrets and ones shorter than
// MinScrubLen are ignored.
func Scrub(s string, secrets ...string) string {
	for _, v := range expand(secrets) {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
}

// expand returns the secrets to look for, longest first (so that a
// secret containing another is replaced whole).
func expand(secrets []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range secrets {
		if len(v) < MinScrubLen {
			continue
		}
		for _, f := range []string{v, url.QueryEscape(v), url.PathEscape(v)} {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// ScrubError returns an error whose message is err's with the secrets
// scrubbed, and which unwraps to err (errors.Is and errors.As still see
// the original). Nil stays nil.
func ScrubError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := Scrub(err.Error(), secrets...)
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// Writer scrubs known secrets from everything written through it. Each
// Write is scrubbed on its own, so a secret split across two writes would
// pass: it suits line-oriented output (logs, error messages). Safe for
// concurrent use if the underlying writer is.
type Writer struct {
	w       io.Writer
	mu      sync.RWMutex
	secrets []string
}

// NewWriter returns a Writer on w that scrubs secrets.
func NewWriter(w io.Writer, secrets ...string) *Writer {
	sw := &Writer{w: w}
	sw.Add(secrets...)
	return sw
}

// Add adds secrets to scrub from later writes.
func (w *Writer) Add(secrets ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.secrets = expand(append(w.secrets, secrets...))
}

// Write writes p with the secrets replaced. It reports len(p) written
// when the scrubbed text was written whole.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.RLock()
	secrets := w.secrets
	w.mu.RUnlock()
	s := string(p)
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ScrubURLs returns s with each URL of a comma-separated list (as given,
// credentials and all) replaced by its RedactURL form, and then the URLs'
// passwords and tokens scrubbed wherever else they appear (whatever their
// length: they are known to be credentials).
func ScrubURLs(s, list string) string {
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		if red := RedactURL(raw); red != raw {
			s = strings.ReplaceAll(s, raw, red)
		}
	}
	for _, v := range URLSecrets(list) {
		if v != "" && v != Redacted {
			s = replaceToken(s, v)
		}
	}
	return s
}

// replaceToken replaces v in s where it is not part of a longer word, so
// that a short password does not garble the text around it.
func replaceToken(s, v string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, v)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		before, after := i == 0 || !isWordByte(s[i-1]), i+len(v) == len(s) || !isWordByte(s[i+len(v)])
		b.WriteString(s[:i])
		if before && after {
			b.WriteString(Redacted)
		} else {
			b.WriteString(v)
		}
		s = s[i+len(v):]
	}
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// ScrubURLsError is ScrubURLs for an error; the result unwraps to err.
func ScrubURLsError(err error, list string) error {
	if err == nil {
		return nil
	}
	msg := ScrubURLs(err.Error(), list)
	if msg == err.Error() {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}
