// Package natsguard refuses a nats-server configuration that would let
// someone in without a secret: a user whose password came out empty (an
// empty environment variable behind password: $VAR gives a user with no
// password, and nats-server accepts it), an empty token, route credentials
// or JetStream store key, and any of those that is still a placeholder
// ("$ROUTE_PASSWORD" quoted, so taken as the text itself: a password
// anyone who read the file or its template knows).
//
// nats-server itself refuses an unset variable but not an empty one. The
// NATS image runs its configs through this check before it starts the
// server (deploy/nats/guard), and so does an embedded server started from
// a file (foundryq dev --nats-config).
package natsguard

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/conf"
)

// ErrEmptySecret is wrapped by CheckFile's refusal of an empty secret.
var ErrEmptySecret = errors.New("empty secret in nats config")

// ErrUnreplacedSecret is wrapped by CheckFile's refusal of a secret that
// is a placeholder nobody replaced: the whole value is $NAME, ${NAME} or
// $(NAME) (nats-server takes a quoted "$NAME" as the text itself, a
// password anyone who read the file knows).
var ErrUnreplacedSecret = errors.New("unreplaced placeholder for a secret in nats config")

// CheckFile parses the nats-server configuration at path as nats-server
// does (includes followed, $VARIABLES resolved from the file or the
// environment) and returns an error wrapping ErrEmptySecret for the first
// secret that is empty or ErrUnreplacedSecret for one that is a
// placeholder, naming where it is (never its value), or the parser's
// error (an unset variable, a syntax error).
func CheckFile(path string) error {
	m, err := conf.ParseFile(path)
	if err != nil {
		return fmt.Errorf("nats config %s: %w", path, err)
	}
	if err := check("", m); err != nil {
		return fmt.Errorf("nats config %s: %w", path, err)
	}
	return nil
}

// Keys (lower case: nats-server reads keys case-insensitively).
var (
	secretKeys = map[string]bool{"password": true, "pass": true, "token": true, "auth_token": true}
	userKeys   = map[string]bool{"user": true, "username": true}
)

func check(path string, v any) error {
	switch v := v.(type) {
	case map[string]any:
		lower := make(map[string]any, len(v))
		keys := make([]string, 0, len(v))
		for k, x := range v {
			lower[strings.ToLower(k)] = x
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if secretKeys[strings.ToLower(k)] && empty(v[k]) {
				return fmt.Errorf("%w: %s is empty (set its variable to a non-empty value)", ErrEmptySecret, join(path, k))
			}
			if secretKeys[strings.ToLower(k)] && placeholder(v[k]) {
				return fmt.Errorf("%w: %s is a placeholder, not a secret (replace it, or write $NAME unquoted to read the variable)", ErrUnreplacedSecret, join(path, k))
			}
		}
		if user := firstOf(lower, userKeys); user != "" && lower["nkey"] == nil && firstOf(lower, secretKeys) == "" {
			return fmt.Errorf("%w: %s: user %q has no password", ErrEmptySecret, orTop(path), user)
		}
		if _, ok := lower["cipher"]; ok && empty(lower["key"]) {
			return fmt.Errorf("%w: %s is empty: the store's encryption key (set its variable to a non-empty value)", ErrEmptySecret, join(path, "key"))
		}
		if _, ok := lower["cipher"]; ok && placeholder(lower["key"]) {
			return fmt.Errorf("%w: %s is a placeholder: the store's encryption key (replace it)", ErrUnreplacedSecret, join(path, "key"))
		}
		for _, k := range keys {
			if err := check(join(path, k), v[k]); err != nil {
				return err
			}
		}
	case []any:
		for i, x := range v {
			if err := check(fmt.Sprintf("%s[%d]", path, i), x); err != nil {
				return err
			}
		}
	case string:
		// Route URLs with credentials: nats-route://user:pass@host:6222.
		if u, err := url.Parse(v); err == nil && u.User != nil && strings.Contains(u.Scheme, "nats") {
			p, ok := u.User.Password()
			if !ok || strings.TrimSpace(p) == "" {
				return fmt.Errorf("%w: %s: the URL's password is empty", ErrEmptySecret, orTop(path))
			}
			if placeholder(p) {
				return fmt.Errorf("%w: %s: the URL's password is a placeholder, not a secret", ErrUnreplacedSecret, orTop(path))
			}
		}
	}
	return nil
}

// empty: missing from the map is not empty (nothing to check); present
// and blank, or present with no value, is.
func empty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return strings.TrimSpace(v) == ""
	}
	return false
}

// placeholderRE is a whole value that names a variable instead of
// holding it: $NAME, ${NAME}, $(NAME) (shell, Compose, Kubernetes).
var placeholderRE = regexp.MustCompile(`^\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\}|\([A-Za-z_][A-Za-z0-9_]*\))$`)

// placeholder reports whether v is a string that is only a variable's
// name (a bcrypt hash, $2a$..., is not: no name starts with a digit).
func placeholder(v any) bool {
	s, ok := v.(string)
	return ok && placeholderRE.MatchString(strings.TrimSpace(s))
}

// IsPlaceholder reports whether s is a placeholder CheckFile refuses as
// a secret ($NAME, ${NAME}, $(NAME)).
func IsPlaceholder(s string) bool { return placeholder(s) }

// firstOf returns the first non-empty string among keys of m ("" if none).
func firstOf(m map[string]any, keys map[string]bool) string {
	for k := range keys {
		if s, ok := m[k].(string); ok && strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orTop(path string) string {
	if path == "" {
		return "top level"
	}
	return path
}
