package natsembed_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/foundryq/foundryq/internal/natsembed"
	"github.com/foundryq/foundryq/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func jsRoundTrip(t *testing.T, s *natsembed.Server) {
	t.Helper()
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	ack, err := js.Publish(ctx, "t.1", []byte("x"))
	if err != nil || ack.Sequence != 1 {
		t.Fatalf("publish: %v %+v", err, ack)
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	t.Run("tcp", func(t *testing.T) {
		t.Parallel()
		s := natsembed.StartT(t, natsembed.Config{})
		if !strings.HasPrefix(s.ClientURL(), "nats://127.0.0.1:") {
			t.Fatalf("ClientURL = %q", s.ClientURL())
		}
		jsRoundTrip(t, s)
	})
	t.Run("in process", func(t *testing.T) {
		t.Parallel()
		s := natsembed.StartT(t, natsembed.Config{InProcess: true})
		if s.ClientURL() != "" {
			t.Fatalf("ClientURL = %q, want empty", s.ClientURL())
		}
		jsRoundTrip(t, s)
	})
	t.Run("logger and store dir", func(t *testing.T) {
		t.Parallel()
		var buf testkit.Buffer
		l := zerolog.New(&buf)
		dir := t.TempDir()
		s, err := natsembed.Start(natsembed.Config{InProcess: true, StoreDir: dir, Logger: &l})
		if err != nil {
			t.Fatal(err)
		}
		jsRoundTrip(t, s)
		if s.StoreDir() != dir {
			t.Fatalf("StoreDir = %q, want %q", s.StoreDir(), dir)
		}
		s.Shutdown()
		s.Shutdown() // twice is fine
		if !strings.Contains(buf.String(), "nats-server") {
			t.Fatalf("no server log lines: %q", buf.String())
		}
	})
	t.Run("bad port", func(t *testing.T) {
		t.Parallel()
		if _, err := natsembed.Start(natsembed.Config{Port: 70000}); err == nil || !strings.Contains(err.Error(), "Port") {
			t.Fatalf("err = %v, want one naming Port", err)
		}
	})
	t.Run("port in use", func(t *testing.T) {
		t.Parallel()
		a := natsembed.StartT(t, natsembed.Config{})
		p := a.NATS().Addr().(*net.TCPAddr).Port
		_, err := natsembed.Start(natsembed.Config{Port: p, ReadyTimeout: time.Second})
		if err == nil {
			t.Fatal("second server on the same port started")
		}
	})
}

// StartT's server serves until the test ends, and is shut down by its
// cleanup.
func TestStartT(t *testing.T) {
	t.Parallel()
	var s *natsembed.Server
	t.Run("started", func(t *testing.T) {
		s = natsembed.StartT(t, natsembed.Config{InProcess: true})
		jsRoundTrip(t, s)
	})
	if s == nil || s.NATS().Running() {
		t.Fatal("the server still runs after its test")
	}
}

func TestRunTest(t *testing.T) {
	t.Parallel()
	s, nc := natsembed.RunTest(t)
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	jsRoundTrip(t, s)
}

func TestStartFromConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "nats.conf")
	// A fixed port, a monitoring port and a store dir that the overrides
	// must replace: the test would fail on a busy 4222/8222 or a missing /nonexistent.
	conf := `server_name: from-file
port: 4222
http_port: 8222
jetstream { store_dir: /nonexistent/js }
accounts { A { jetstream: enabled, users: [ { user: u, password: p } ] } }
`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s := natsembed.StartT(t, natsembed.Config{ConfigFile: file})
	if p := s.NATS().Addr().(*net.TCPAddr).Port; p == 4222 {
		t.Errorf("listening on the file's port 4222, want a random one")
	}
	if s.NATS().MonitorAddr() != nil {
		t.Errorf("monitoring listens on %v, want off", s.NATS().MonitorAddr())
	}
	if name := s.NATS().Name(); name != "from-file" {
		t.Errorf("server name %q, want the file's from-file", name)
	}
	if _, err := s.Connect(); err == nil {
		t.Fatal("connected without the file's credentials")
	}
	nc, err := s.Connect(nats.UserInfo("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatalf("JetStream in the file's account: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.StoreDir(), "jetstream")); err != nil {
		t.Errorf("no JetStream data in the overriding store dir: %v", err)
	}
}

func TestStartFromBadConfigFile(t *testing.T) {
	t.Parallel()
	_, err := natsembed.Start(natsembed.Config{ConfigFile: filepath.Join(t.TempDir(), "missing.conf")})
	if err == nil || !strings.Contains(err.Error(), "config file") {
		t.Fatalf("err = %v, want a config file error", err)
	}
}
