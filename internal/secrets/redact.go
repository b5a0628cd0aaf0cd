package secrets

import (
	"bytes"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
)

// Redacted replaces a credential in every output.
const Redacted = "REDACTED"

// credentialKeys are field names (lower-cased, '-' as '_') whose string
// values are credentials wherever they appear in a tool or in options.
var credentialKeys = map[string]bool{
	"authorization": true, "api_key": true, "apikey": true, "password": true, "passwd": true,
	"token": true, "access_token": true, "refresh_token": true, "id_token": true, "bearer": true,
	"client_secret": true, "secret_key": true, "private_key": true, "credentials": true, "sas_token": true,
}

func isCredentialKey(k string) bool {
	return credentialKeys[strings.ReplaceAll(strings.ToLower(k), "-", "_")]
}

// RedactRequest returns a copy of a run request body (JSON) safe to store
// in dead letters, log or print: in "tools" and "options", every header
// value whatever its JSON shape (string, object, array, number, bool; a
// "headers" field that is not an object, whole; any field whose name
// contains "header" counts), every value under a credential-like key
// (authorization, api_key, password, token, client_secret, ...) and the
// password and query values of URLs are replaced with Redacted. Secret
// references ({"secret": NAME} with a valid name and nothing else) name a
// secret without holding it and are kept. Other
// fields are kept; top-level keys come out sorted. A body that is not a
// JSON object is returned as it is unless it contains something that
// looks like a credential field, in which case a JSON note replaces it
// (a malformed body cannot be redacted field by field).
func RedactRequest(body []byte) []byte {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		if looksCredentialBearing(body) {
			return []byte(`{"redacted":"request body withheld: not a JSON object, and it may hold credentials"}`)
		}
		return body
	}
	changed := false
	for _, key := range []string{"tools", "options"} {
		raw, ok := top[key]
		if !ok {
			continue
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if dec.Decode(&v) != nil {
			top[key] = json.RawMessage(`"` + Redacted + `"`)
			changed = true
			continue
		}
		switch v.(type) {
		case map[string]any, []any:
		default:
			if v != nil { // a bare value where an array or object belongs: nothing to keep
				top[key] = json.RawMessage(`"` + Redacted + `"`)
				changed = true
			}
			continue
		}
		if redactValue(v) {
			b, err := marshal(v)
			if err != nil {
				top[key] = json.RawMessage(`"` + Redacted + `"`)
			} else {
				top[key] = b
			}
			changed = true
		}
	}
	if !changed {
		return body
	}
	b, err := marshal(top)
	if err != nil {
		return []byte(`{"redacted":"request body withheld"}`)
	}
	return b
}

// RedactTools applies RedactRequest's rules to each tool.
func RedactTools(tools []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		var v any
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.UseNumber()
		if dec.Decode(&v) != nil {
			if looksCredentialBearing(t) {
				out[i] = json.RawMessage(`"` + Redacted + `"`)
			} else {
				out[i] = t
			}
			continue
		}
		if !redactValue(v) {
			out[i] = t
			continue
		}
		b, err := marshal(v)
		if err != nil {
			b = json.RawMessage(`"` + Redacted + `"`)
		}
		out[i] = b
	}
	return out
}

// redactValue redacts v in place (maps and slices) and reports whether it
// changed anything.
func redactValue(v any) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		if isReference(x) {
			return false // a secret reference holds a name, not a value
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			val := x[k]
			switch {
			case val == nil:
			case isHeadersKey(k):
				if redactHeaders(x, k) {
					changed = true
				}
			case isCredentialKey(k):
				// e.g. "token": "…", "credentials": {...}: the whole value
				if !isReference(val) && val != Redacted {
					x[k], changed = Redacted, true
				}
			default:
				if s, ok := val.(string); ok {
					if r := RedactURL(s); r != s {
						x[k], changed = r, true
					}
				} else if redactValue(val) {
					changed = true
				}
			}
		}
	case []any:
		for i, e := range x {
			if s, ok := e.(string); ok {
				if r := RedactURL(s); r != s {
					x[i], changed = r, true
				}
				continue
			}
			if redactValue(e) {
				changed = true
			}
		}
	}
	return changed
}

// isHeadersKey reports whether a field holds HTTP headers ("headers",
// "Headers", "extra_headers", ...): all its values are credentials.
func isHeadersKey(k string) bool {
	return strings.Contains(strings.ToLower(k), "header")
}

// redactHeaders redacts parent[k], a headers field: every value of a
// headers object, whatever its JSON shape (string, object, array, number,
// bool), except a secret reference and null; a headers field that is not
// an object, whole.
func redactHeaders(parent map[string]any, k string) bool {
	h, ok := parent[k].(map[string]any)
	if !ok {
		if parent[k] == Redacted {
			return false
		}
		parent[k] = Redacted
		return true
	}
	changed := false
	for name, val := range h {
		if val == nil || val == Redacted || isReference(val) {
			continue
		}
		h[name], changed = Redacted, true
	}
	return changed
}

// isReference reports whether v is a secret reference: {"secret": NAME}
// with a valid name, and nothing else. Anything else under "secret" may
// be a value in disguise.
func isReference(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return false
	}
	name, ok := m["secret"].(string)
	return ok && ValidName(name)
}

// looksCredentialBearing is the test for bodies that cannot be parsed.
func looksCredentialBearing(b []byte) bool {
	l := strings.ToLower(string(b))
	if strings.Contains(l, "headers") || strings.Contains(l, "://") && strings.Contains(l, "@") {
		return true
	}
	for k := range credentialKeys {
		if strings.Contains(l, k) || strings.Contains(l, strings.ReplaceAll(k, "_", "-")) {
			return true
		}
	}
	return false
}

// RedactURL hides the credentials of a URL: the password of its user
// information (nats://client:REDACTED@host), the whole user information
// when it has no password (a NATS token: nats://REDACTED@host), and the
// value of every query parameter (tokens often travel there). A string
// that is not a URL with a scheme and host is returned as it is, except
// that anything between "://" and an '@' is hidden.
func RedactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || scheme == "" || strings.ContainsAny(scheme, " \t\n\"'") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		// Unparseable: hide user information by hand.
		authority, path, hasPath := rest, "", false
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority, path, hasPath = rest[:i], rest[i:], true
		}
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			authority = Redacted + authority[at:]
		}
		if hasPath {
			if q := strings.Index(path, "?"); q >= 0 {
				path = path[:q+1] + Redacted
			}
		}
		return scheme + "://" + authority + path
	}
	changed := false
	if u.User != nil {
		if _, hasPass := u.User.Password(); hasPass {
			u.User = url.UserPassword(u.User.Username(), Redacted)
		} else {
			u.User = url.User(Redacted)
		}
		changed = true
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{Redacted}
		}
		u.RawQuery = q.Encode()
		changed = true
	}
	if !changed {
		return s
	}
	return u.String()
}

// RedactURLs applies RedactURL to each URL of a comma-separated list (the
// form of --nats-url).
func RedactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = RedactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// URLSecrets returns the passwords and tokens in the user information of a
// comma-separated URL list, for Scrub.
func URLSecrets(list string) []string {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		_, rest, ok := strings.Cut(p, "://")
		if !ok {
			continue
		}
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			rest = rest[:i]
		}
		at := strings.LastIndex(rest, "@")
		if at < 0 {
			continue
		}
		userinfo := rest[:at]
		if user, pass, hasPass := strings.Cut(userinfo, ":"); hasPass {
			out = append(out, pass)
			if dec, err := url.PathUnescape(pass); err == nil && dec != pass {
				out = append(out, dec)
			}
		} else {
			out = append(out, user) // a token
			if dec, err := url.PathUnescape(user); err == nil && dec != user {
				out = append(out, dec)
			}
		}
	}
	return out
}
