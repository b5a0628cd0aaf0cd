package events_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
)

// inboxServer starts a server whose users may each subscribe only to their
// own inbox prefix (as deploy/nats/nats-server.conf does), plus a token.
func inboxServer(t *testing.T) *natsembed.Server {
	t.Helper()
	file := filepath.Join(t.TempDir(), "nats.conf")
	conf := `authorization {
  users: [
    { user: alice, password: alicepw, permissions: { publish: ["echo"], subscribe: ["_INBOX.alice.>"] } }
    { user: bob, password: bobpw, permissions: { subscribe: ["echo", "_INBOX.bob.>"], publish: { deny: [">"] }, allow_responses: true } }
    { user: "a.b", password: abpw }
  ]
}`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return natsembed.StartT(t, natsembed.Config{ConfigFile: file})
}

// withUser returns the server's URL with user information.
func withUser(s *natsembed.Server, userinfo string) string {
	return strings.Replace(s.ClientURL(), "nats://", "nats://"+userinfo+"@", 1)
}

func TestInboxPrefix(t *testing.T) {
	t.Parallel()
	if p, err := events.InboxPrefix("client"); err != nil || p != "_INBOX.client" {
		t.Fatalf("InboxPrefix(client) = %q, %v", p, err)
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b"} {
		if _, err := events.InboxPrefix(bad); err == nil {
			t.Errorf("InboxPrefix(%q) accepted", bad)
		}
	}
}

func TestConnectDerivesTheInboxPrefix(t *testing.T) {
	t.Parallel()
	s := inboxServer(t)
	responder, err := events.Connect(withUser(s, "bob:bobpw"))
	if err != nil {
		t.Fatal(err)
	}
	defer responder.Close()
	if _, err := responder.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := responder.Flush(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, url string
		opts      []nats.Option
		prefix    string
	}{
		{"user in the URL", withUser(s, "alice:alicepw"), nil, "_INBOX.alice."},
		{"user in an option", s.ClientURL(), []nats.Option{nats.UserInfo("alice", "alicepw")}, "_INBOX.alice."},
		{"the URL's user wins, as in nats.go", withUser(s, "alice:alicepw"), []nats.Option{nats.UserInfo("bob", "bobpw")}, "_INBOX.alice."},
		{"a configured prefix is kept", withUser(s, "alice:alicepw"), []nats.Option{nats.CustomInboxPrefix("_INBOX.alice.custom")}, "_INBOX.alice.custom."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := events.Connect(tt.url, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if inbox := nc.NewInbox(); !strings.HasPrefix(inbox, tt.prefix) {
				t.Fatalf("inbox %q, want prefix %q", inbox, tt.prefix)
			}
			// The reply reaches a user allowed only its own inbox.
			m, err := nc.Request("echo", []byte("ping"), 10*time.Second)
			if err != nil || string(m.Data) != "ping" {
				t.Fatalf("request: %v", err)
			}
		})
	}
	t.Run("without Connect the default inbox is refused", func(t *testing.T) {
		violations := make(chan error, 8)
		nc, err := nats.Connect(withUser(s, "alice:alicepw"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			violations <- err
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		go func() { _, _ = nc.Request("echo", []byte("ping"), 30*time.Second) }()
		select {
		case err := <-violations:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "Subscription to \"_INBOX.") {
				t.Fatalf("async error %v, want a subscription violation on _INBOX", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the default _INBOX prefix was not refused")
		}
	})
}

func TestConnectTokenIsNoName(t *testing.T) {
	t.Parallel()
	// nats://TOKEN@host: the user information is a token; it must never
	// become part of a subject.
	_, err := events.Connect("nats://sometoken@127.0.0.1:1", nats.Timeout(time.Second))
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "sometoken") || strings.Contains(err.Error(), "_INBOX") {
		t.Fatalf("error %q quotes the token or an inbox", err)
	}
}

func TestConnectBadUserName(t *testing.T) {
	t.Parallel()
	s := inboxServer(t)
	_, err := events.Connect(withUser(s, "a.b:abpw"))
	if err == nil || !strings.Contains(err.Error(), "inbox prefix") || strings.Contains(err.Error(), "abpw") {
		t.Fatalf("user a.b: %v, want an inbox prefix error without the password", err)
	}
}

func TestConnectErrorsHideCredentials(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url  string
		opts []nats.Option
		is   error
	}{
		{"nats://client:Pw-0001@127.0.0.1:1", nil, nats.ErrNoServers},
		{"nats://client:Pw-0002@ho st:4222", nil, nil}, // a URL parse error quotes the URL
		{"nats://client:Pw-0003@[::1", nil, nil},
		{"nats://tok-0004@ho st:4222", nil, nil},
		{"nats://127.0.0.1:1", []nats.Option{nats.UserInfo("client", "Pw-0005")}, nats.ErrNoServers},
		{"nats://127.0.0.1:1,nats://client:Pw-0006@ho st:1", nil, nil},
	}
	for _, tt := range tests {
		_, err := events.Connect(tt.url, append(tt.opts, nats.Timeout(time.Second))...)
		if err == nil {
			t.Fatalf("%s: connected", tt.url)
		}
		for _, secret := range []string{"Pw-0001", "Pw-0002", "Pw-0003", "tok-0004", "Pw-0005", "Pw-0006"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error for %s shows %s: %v", tt.url, secret, err)
			}
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("error for %s: %v, want it to wrap %v", tt.url, err, tt.is)
		}
		if !strings.Contains(err.Error(), "REDACTED") && strings.Contains(tt.url, "@") {
			t.Errorf("error for %s does not name the redacted server: %v", tt.url, err)
		}
	}
}
