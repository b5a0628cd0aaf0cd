package natsguard_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/internal/natsguard"
)

func TestCheckFile(t *testing.T) {
	t.Setenv("NATSGUARD_EMPTY", "")
	t.Setenv("NATSGUARD_SET", "s3cret")
	cases := []struct {
		name, conf string
		err        error  // nil: accepted
		where      string // part of the message
	}{
		{"passwords set", `accounts { A { users: [ {user: a, password: $NATSGUARD_SET}, {user: b, password: "x"} ] } }`, nil, ""},
		{"nkey user", `authorization { users: [ {nkey: UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4} ] }`, nil, ""},
		{"no auth at all", `port: 4222`, nil, ""},
		{"empty variable in an account", `accounts { A { users: [ {user: a, password: $NATSGUARD_SET}, {user: b, password: $NATSGUARD_EMPTY} ] } }`, natsguard.ErrEmptySecret, "accounts.A.users[1].password"},
		{"empty literal", `authorization { user: a, password: "" }`, natsguard.ErrEmptySecret, "authorization.password"},
		{"blank literal", `authorization { user: a, password: "  " }`, natsguard.ErrEmptySecret, "authorization.password"},
		{"key case", `authorization { user: a, PassWord: $NATSGUARD_EMPTY }`, natsguard.ErrEmptySecret, "PassWord"},
		{"user without password", `authorization { users: [ {user: a} ] }`, natsguard.ErrEmptySecret, `user "a" has no password`},
		{"empty token", `authorization { token: $NATSGUARD_EMPTY }`, natsguard.ErrEmptySecret, "authorization.token"},
		{"empty route password", `cluster { port: 6222, authorization { user: route, password: $NATSGUARD_EMPTY } }`, natsguard.ErrEmptySecret, "cluster.authorization.password"},
		{"empty password in a route URL", `cluster { port: 6222, routes: ["nats-route://route:@nats-1:6222"] }`, natsguard.ErrEmptySecret, "cluster.routes[0]"},
		{"empty store key", `jetstream { store_dir: /data, cipher: chachapoly, key: $NATSGUARD_EMPTY }`, natsguard.ErrEmptySecret, "jetstream.key"},
	}
	cases = append(cases, []struct {
		name, conf string
		err        error
		where      string
	}{
		// A placeholder nobody replaced: quoted, nats-server takes it as the
		// password itself, one anybody who read the file knows.
		{"placeholder password", `cluster { port: 6222, authorization { user: route, password: "$ROUTE_PASSWORD" } }`, natsguard.ErrUnreplacedSecret, "cluster.authorization.password"},
		{"placeholder in braces", `authorization { user: a, password: "${CLIENT_PASSWORD}" }`, natsguard.ErrUnreplacedSecret, "authorization.password"},
		{"placeholder token", `authorization { token: "$(TOKEN)" }`, natsguard.ErrUnreplacedSecret, "authorization.token"},
		{"placeholder in a route URL", `cluster { port: 6222, routes: ["nats-route://route:$ROUTE_PASSWORD@nats-1:6222"] }`, natsguard.ErrUnreplacedSecret, "cluster.routes[0]"},
		{"placeholder in a route URL, escaped", `cluster { port: 6222, routes: ["nats://route:%24ROUTE_PASSWORD@nats-0.nats-headless:6222"] }`, natsguard.ErrUnreplacedSecret, "cluster.routes[0]"},
		{"placeholder store key", `jetstream { store_dir: /data, cipher: chachapoly, key: "$JETSTREAM_KEY" }`, natsguard.ErrUnreplacedSecret, "jetstream.key"},
		// A bcrypt hash starts with $ too; a variable resolved is no placeholder.
		{"bcrypt hash", `authorization { user: a, password: "$2a$11$W2zko751KUvVy59mUTWmpOdWjpEm5qhcCZRd05GjI/sSOT.xtiHyG" }`, nil, ""},
		{"a password with a dollar inside", `authorization { user: a, password: "ab$cd" }`, nil, ""},
		{"variable resolved", `authorization { user: a, password: $NATSGUARD_SET }`, nil, ""},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "test.conf")
			if err := os.WriteFile(path, []byte(tc.conf), 0o600); err != nil {
				t.Fatal(err)
			}
			err := natsguard.CheckFile(path)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.where) {
				t.Fatalf("err %v, want %v naming %q", err, tc.err, tc.where)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the message shows a secret: %v", err)
			}
		})
	}
}

// An unset variable is the parser's own error, naming the variable.
func TestCheckFileUnsetVariable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.conf")
	if err := os.WriteFile(path, []byte(`authorization { user: a, password: $NATSGUARD_NEVER_SET }`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := natsguard.CheckFile(path); err == nil || !strings.Contains(err.Error(), "NATSGUARD_NEVER_SET") {
		t.Fatalf("err %v, want one naming the unset variable", err)
	}
}
