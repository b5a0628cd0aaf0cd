package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// ReaderConfig configures the bare reader: the floor foundryq is compared
// with, a minimal client that streams responses straight from Foundry (the
// emulator) as the worker does (background, streamed), decodes each event
// and discards it.
type ReaderConfig struct {
	// BaseURL is the Foundry v1 base URL (the emulator's). Required.
	BaseURL string
	// APIKey is sent as api-key. Default "bench".
	APIKey string
	// Prefix names the runs: metadata.run_id is Prefix-0, Prefix-1, ...
	// Required.
	Prefix string
	// Runs is the number of responses streamed at once. Default 1.
	Runs int
	// Tokens is emu_tokens of each response. Default 50.
	Tokens int
	// TokenDelay is emu_token_ms of each response (whole milliseconds).
	// Default 0.
	TokenDelay time.Duration
	// H2C speaks HTTP/2 without TLS (as the worker with --foundry-h2c).
	// Default false: HTTP/1.1.
	H2C bool
}

func (c ReaderConfig) withDefaults() ReaderConfig {
	if c.APIKey == "" {
		c.APIKey = "bench"
	}
	if c.Runs == 0 {
		c.Runs = 1
	}
	if c.Tokens == 0 {
		c.Tokens = 50
	}
	return c
}

func (c ReaderConfig) validate() error {
	switch {
	case c.BaseURL == "":
		return errors.New("loadtest: ReaderConfig.BaseURL is required")
	case c.Prefix == "":
		return errors.New("loadtest: ReaderConfig.Prefix is required")
	case c.Runs < 0 || c.Tokens < 0 || c.TokenDelay < 0:
		return errors.New("loadtest: ReaderConfig.Runs, Tokens and TokenDelay must not be negative")
	}
	return nil
}

// receipt is the moment a reader had received cum bytes of a run's text.
type receipt struct {
	At  int64 `json:"t"` // Unix ns
	Cum int   `json:"n"`
}

// ReaderResult is what the bare reader measured.
type ReaderResult struct {
	// CPU is the CPU time (user+system) the reader's process used while
	// reading, in nanoseconds.
	CPU int64 `json:"cpu_ns"`
	// Tokens is the number of text deltas received.
	Tokens int `json:"tokens"`
	// Receipts holds, per run id, when each text delta arrived.
	Receipts map[string][]receipt `json:"receipts"`
}

// RunReader streams cfg.Runs responses at once and reads each to its end.
// It measures its own process's CPU time: run it in a process of its own
// (foundryq bench starts `foundryq bench-reader`).
func RunReader(ctx context.Context, cfg ReaderConfig) (ReaderResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return ReaderResult{}, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = cfg.Runs
	if cfg.H2C {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	hc := &http.Client{Transport: tr}
	defer hc.CloseIdleConnections()
	receipts := make([][]receipt, cfg.Runs)
	cpu0 := selfCPU()
	var g errgroup.Group
	for i := range cfg.Runs {
		g.Go(func() error {
			md := map[string]string{"run_id": fmt.Sprintf("%s-%d", cfg.Prefix, i),
				"emu_tokens": strconv.Itoa(cfg.Tokens), "emu_token_ms": strconv.FormatInt(cfg.TokenDelay.Milliseconds(), 10)}
			body, err := openStream(ctx, hc, cfg.BaseURL, cfg.APIKey, md, true)
			if err != nil {
				return err
			}
			defer body.Close()
			rs := make([]receipt, 0, cfg.Tokens)
			err = readStream(body, func(typ string, delta int) bool {
				if typ == "response.output_text.delta" {
					cum := delta
					if n := len(rs); n > 0 {
						cum += rs[n-1].Cum
					}
					rs = append(rs, receipt{At: time.Now().UnixNano(), Cum: cum})
				}
				return true
			})
			receipts[i] = rs
			return err
		})
	}
	err := g.Wait()
	res := ReaderResult{CPU: int64(selfCPU() - cpu0), Receipts: make(map[string][]receipt, cfg.Runs)}
	for i, rs := range receipts {
		res.Tokens += len(rs)
		res.Receipts[fmt.Sprintf("%s-%d", cfg.Prefix, i)] = rs
	}
	return res, err
}

// selfCPU is this process's user plus system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// openStream creates a streamed response with metadata md (background or
// not) and returns its event stream.
func openStream(ctx context.Context, hc *http.Client, baseURL, apiKey string, md map[string]string, background bool) (io.ReadCloser, error) {
	body, err := json.Marshal(map[string]any{"model": "bench", "input": "benchmark", "stream": true, "background": background, "metadata": md})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"responses", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Api-Key", apiKey)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", md["run_id"], err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("create %s: %s: %s", md["run_id"], resp.Status, b)
	}
	return resp.Body, nil
}

// sseEvent is the part of a Responses stream event the reader decodes.
type sseEvent struct {
	Type  string `json:"type"`
	Delta string `json:"delta"`
}

// readStream decodes the SSE events of r, calling each with the event's
// type and the length of its delta, until the stream ends, a terminal
// event arrives or each returns false.
func readStream(r io.Reader, each func(typ string, delta int) bool) error {
	br := bufio.NewReader(r)
	var ev sseEvent
	var long []byte // a line longer than br's buffer
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read stream: %w", err)
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		ev = sseEvent{}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		if !each(ev.Type, len(ev.Delta)) {
			return nil
		}
		switch ev.Type {
		case "response.completed", "response.failed", "response.incomplete", "error":
			return nil
		}
	}
}
