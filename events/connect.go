package events

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/internal/secrets"
)

// InboxPrefix returns the reply inbox prefix of a NATS user under
// foundryq's server configurations (deploy/nats): "_INBOX.<user>". Each user
// may subscribe only to "_INBOX.<user>.>", so no user can read the replies
// to another's requests (JetStream acks, API answers, messages pulled from
// a consumer, cancel replies). The user name must be a single subject
// token: no '.', '*', '>' or white space.
func InboxPrefix(user string) (string, error) {
	if user == "" || strings.ContainsAny(user, ".*> \t\r\n") {
		return "", fmt.Errorf("events: NATS user %q cannot name an inbox prefix (_INBOX.<user>): it must be one subject token, without '.', '*', '>' or spaces", user)
	}
	return "_INBOX." + user, nil
}

// Connect connects to NATS like nats.Connect, and uses the inbox prefix of
// the connecting user (InboxPrefix) unless an option sets one
// (nats.CustomInboxPrefix). The user is the one in the URL's user
// information (nats://client:PASSWORD@host, as nats.go gives it precedence)
// or else the one of a nats.UserInfo option. A URL user without a password
// is a token, never used as a name; with an nkey or a credentials file
// (JWT) the user has no name here: set nats.CustomInboxPrefix to the prefix
// the server allows.
//
// Errors never quote the password or token of url: they name the servers
// with their credentials redacted.
func Connect(serverURL string, opts ...nats.Option) (*nats.Conn, error) {
	var probe nats.Options
	for _, o := range opts {
		if o != nil {
			_ = o(&probe) // failures are reported by nats.Connect below
		}
	}
	all := opts
	if probe.InboxPrefix == "" {
		user := urlUser(serverURL)
		if user == "" {
			user = probe.User
		}
		if user != "" {
			prefix, err := InboxPrefix(user)
			if err != nil {
				return nil, err
			}
			all = append(append([]nats.Option{}, opts...), nats.CustomInboxPrefix(prefix))
		}
	}
	nc, err := nats.Connect(serverURL, all...)
	if err != nil {
		err = secrets.ScrubError(secrets.ScrubURLsError(err, serverURL), probe.Password, probe.Token)
		return nil, fmt.Errorf("events: connect to NATS at %s: %w", secrets.RedactURLs(serverURL), err)
	}
	return nc, nil
}

// urlUser returns the user name of the first URL in a comma-separated list
// whose user information has a password.
func urlUser(list string) string {
	for _, s := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.User == nil {
			continue
		}
		if _, hasPass := u.User.Password(); hasPass && u.User.Username() != "" {
			return u.User.Username()
		}
	}
	return ""
}
