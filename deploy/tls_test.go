package deploy

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/tlstest"
)

// TestTLSConfig runs nats-server-tls.conf (mutual TLS, encrypted store, the
// users of nats-server.conf) with certificates made by the test: worker
// and client work over TLS with their certificates, every other way in is
// refused, and the store on disk does not show a queued request's bytes.
func TestTLSConfig(t *testing.T) {
	certs := tlstest.New(t)
	conf := certs.ServerConfig(t, "nats", "nats-server-tls.conf")
	env := map[string]string{"WORKER_PASSWORD": "workerpw2", "CLIENT_PASSWORD": "clientpw2", "GATEWAY_PASSWORD": "gatewaypw2", "TOOLS_PASSWORD": "toolspw2", "JETSTREAM_KEY": "jskey0123456789"}
	s := startConfigFile(t, conf, env)
	if !strings.HasPrefix(s.ClientURL(), "tls://") {
		t.Fatalf("client URL %s, want tls://", s.ClientURL())
	}
	tlsOpts := []nats.Option{nats.RootCAs(certs.CA), nats.ClientCert(certs.ClientCert, certs.ClientKey)}

	worker := connectAs(t, s, "worker", "workerpw2", tlsOpts...)
	provisionAs(t, worker, "")
	client := connectAs(t, s, "client", "clientpw2", tlsOpts...)
	c, err := events.NewClient(client.nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}

	// Queued while no worker runs: the request sits in the store.
	const marker = "plaintext-marker-7f3a"
	queued := "tls-queued"
	if _, err := c.Submit(testContext(t), events.RunRequest{RunID: queued, Model: "m", Input: json.RawMessage(`"` + marker + `"`)}); err != nil {
		t.Fatal(err)
	}
	t.Run("the store is encrypted", func(t *testing.T) {
		if found := storeHolds(t, s.StoreDir(), marker); found {
			t.Fatalf("the request's bytes are readable in %s", s.StoreDir())
		}
	})

	runWorker(t, worker, emulator(t), consumer.Config{})
	t.Run("runs over TLS", func(t *testing.T) {
		evs := watchToEnd(t, c, queued, events.FromStart, nil)
		if last := evs[len(evs)-1]; last.Type != events.TypeRunCompleted {
			t.Fatalf("terminal event %s, want run.completed", last.Type)
		}
	})

	refused := map[string][]nats.Option{
		"plain text":                         nil,
		"TLS without a client certificate":   {nats.RootCAs(certs.CA)},
		"a client certificate of another CA": {nats.RootCAs(certs.CA), nats.ClientCert(certs.OtherCert, certs.OtherKey)},
		"a server it does not trust":         {nats.RootCAs(certs.OtherCA), nats.ClientCert(certs.ClientCert, certs.ClientKey)},
	}
	for name, opts := range refused {
		t.Run("refused: "+name, func(t *testing.T) {
			if opts == nil {
				// nats:// on the TLS port, no CA, no certificate.
				nc, err := dialPlain(s)
				if err == nil {
					nc.Close()
					t.Fatal("connection accepted")
				}
				return
			}
			if u, err := dialAs(s, "client", "clientpw2", opts...); err == nil {
				u.nc.Close()
				t.Fatal("connection accepted")
			}
		})
	}
	t.Run("client and worker saw no refusal", func(t *testing.T) {
		client.clean(t)
		worker.clean(t)
	})
}

// TestPlainStoreShowsRequests is the control of "the store is encrypted":
// with nats-server.conf the same scan finds the request.
func TestPlainStoreShowsRequests(t *testing.T) {
	s := startConfig(t, "nats-server.conf", map[string]string{"WORKER_PASSWORD": "workerpw3", "CLIENT_PASSWORD": "clientpw3", "GATEWAY_PASSWORD": "gatewaypw3", "TOOLS_PASSWORD": "toolspw3"})
	worker := connectAs(t, s, "worker", "workerpw3")
	provisionAs(t, worker, "")
	client := connectAs(t, s, "client", "clientpw3")
	c, err := events.NewClient(client.nc, events.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const marker = "plaintext-marker-9c1d"
	if _, err := c.Submit(testContext(t), events.RunRequest{RunID: "plain-queued", Model: "m", Input: json.RawMessage(`"` + marker + `"`)}); err != nil {
		t.Fatal(err)
	}
	if !storeHolds(t, s.StoreDir(), marker) {
		t.Fatal("the scan does not find a queued request in a plain store: it cannot tell an encrypted one")
	}
}

// storeHolds reports whether any file under dir contains s (the stores
// write through at once; a submitted request is on disk when it is acked).
func storeHolds(t *testing.T, dir, s string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found = found || bytes.Contains(b, []byte(s))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// dialPlain dials the server's port without TLS.
func dialPlain(s *natsembed.Server) (*nats.Conn, error) {
	url := strings.Replace(s.ClientURL(), "tls://", "nats://client:clientpw2@", 1)
	return nats.Connect(url)
}
