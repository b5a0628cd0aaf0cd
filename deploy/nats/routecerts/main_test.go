package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// load reads the three files of dir.
func load(t *testing.T, dir string) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, certFile), filepath.Join(dir, keyFile))
	if err != nil {
		t.Fatalf("load %s and %s: %v", certFile, keyFile, err)
	}
	pem, err := os.ReadFile(filepath.Join(dir, caFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	return pool, pair
}

// handshake runs a TLS handshake between a route that dials name with
// dialer's files and the node that accepts it with server's, as
// nats-server does (the dialer checks name; the acceptor requires and
// verifies the dialer's certificate).
func handshake(t *testing.T, name string, dialer, server string) error {
	t.Helper()
	dPool, dPair := load(t, dialer)
	sPool, sPair := load(t, server)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srvErr := make(chan error, 1)
	go func() {
		s := tls.Server(b, &tls.Config{Certificates: []tls.Certificate{sPair}, ClientCAs: sPool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
		err := s.HandshakeContext(ctx)
		if err == nil {
			// TLS 1.3: the client's certificate is checked after the
			// client's handshake returns; read to see the verdict.
			_, err = s.Write([]byte{1})
		}
		b.Close()
		srvErr <- err
	}()
	c := tls.Client(a, &tls.Config{Certificates: []tls.Certificate{dPair}, RootCAs: dPool, ServerName: name, MinVersion: tls.VersionTLS12})
	cliErr := c.HandshakeContext(ctx)
	if cliErr == nil {
		_, cliErr = io.ReadFull(c, make([]byte, 1))
	}
	a.Close()
	return errors.Join(cliErr, <-srvErr)
}

func TestGenerateRouteCerts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "certs")
	if err := Generate(Config{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	t.Run("every node name, both ends of a route", func(t *testing.T) {
		for _, name := range DefaultNames {
			if err := handshake(t, name, dir, dir); err != nil {
				t.Errorf("route to %s: %v", name, err)
			}
		}
	})
	t.Run("a name it does not carry is refused", func(t *testing.T) {
		if err := handshake(t, "nats-4", dir, dir); err == nil {
			t.Fatal("handshake for nats-4 succeeded")
		}
	})
	other := filepath.Join(t.TempDir(), "other")
	if err := Generate(Config{Dir: other}); err != nil {
		t.Fatal(err)
	}
	t.Run("each run makes its own CA: another run's node is refused", func(t *testing.T) {
		if err := handshake(t, "nats-1", other, dir); err == nil {
			t.Fatal("a node of another run joined")
		}
		if err := handshake(t, "nats-1", dir, other); err == nil {
			t.Fatal("dialled a node of another run")
		}
	})
	t.Run("the image's user can read the files", func(t *testing.T) {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Fatalf("directory %v, %v: want 0755", st.Mode(), err)
		}
		for _, f := range []string{caFile, certFile, keyFile} {
			st, err := os.Stat(filepath.Join(dir, f))
			if err != nil || st.Mode().Perm() != 0o644 {
				t.Errorf("%s: %v, %v: want 0644", f, st.Mode(), err)
			}
		}
	})
	t.Run("validity", func(t *testing.T) {
		_, pair := load(t, dir)
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Until(leaf.NotAfter); d < DefaultValid-time.Hour || d > DefaultValid {
			t.Errorf("valid for %s more, want about %s", d, DefaultValid)
		}
	})
}

func TestGenerateRefusesToOverwrite(t *testing.T) {
	t.Parallel()
	for _, f := range []string{caFile, certFile, keyFile} {
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, f), []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := Generate(Config{Dir: dir}); !errors.Is(err, os.ErrExist) {
				t.Fatalf("Generate over %s: %v, want os.ErrExist", f, err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != "keep" {
				t.Fatalf("%s was replaced", f)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Fatalf("%d files in the directory, want only the one that was there", len(entries))
			}
		})
	}
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no dir", Config{}},
		{"blank dir", Config{Dir: "  "}},
		{"no names", Config{Dir: dir, Names: []string{}}},
		{"empty name", Config{Dir: dir, Names: []string{""}}},
		{"name with a space", Config{Dir: dir, Names: []string{"nats 1"}}},
		{"name with credentials", Config{Dir: dir, Names: []string{"route:pw@nats-1"}}},
		{"name with a port", Config{Dir: dir, Names: []string{"nats-1:6222"}}},
		{"name ending in a hyphen", Config{Dir: dir, Names: []string{"nats-"}}},
		{"wildcard", Config{Dir: dir, Names: []string{"*.nats"}}},
		{"label too long", Config{Dir: dir, Names: []string{strings.Repeat("a", 64)}}},
		{"name twice", Config{Dir: dir, Names: []string{"nats-1", "NATS-1"}}},
		{"negative validity", Config{Dir: dir, Valid: -time.Hour}},
		{"validity past ten years", Config{Dir: dir, Valid: 11 * DefaultValid}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Generate(tc.cfg); !errors.Is(err, ErrConfig) {
				t.Fatalf("Generate(%+v): %v, want ErrConfig", tc.cfg, err)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused config wrote %d files", len(entries))
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parse([]string{"-dir", "d", "-names", " a, b.example ,", "-valid", "48h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dir != "d" || strings.Join(cfg.Names, "|") != "a|b.example" || cfg.Valid != 48*time.Hour {
		t.Fatalf("parse: %+v", cfg)
	}
	cfg, err = parse([]string{"-dir", "d"}, io.Discard)
	if err != nil || strings.Join(cfg.Names, ",") != "nats-1,nats-2,nats-3" || cfg.Valid != DefaultValid {
		t.Fatalf("defaults: %+v, %v", cfg, err)
	}
	for _, args := range [][]string{{"-dir", "d", "-valid", "0s"}, {"-dir", "d", "-valid", "-1h"}, {"-dir", "d", "extra"}} {
		if _, err := parse(args, io.Discard); !errors.Is(err, ErrConfig) {
			t.Errorf("parse %q: %v, want ErrConfig", args, err)
		}
	}
	cfg, err = parse([]string{"-dir", "d", "-names", ","}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := Generate(cfg); !errors.Is(err, ErrConfig) {
		t.Fatalf("-names \",\": %v, want ErrConfig", err)
	}
}
