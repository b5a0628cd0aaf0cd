package foundry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestCreateStreamsToTerminal(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		writeRun(startSSE(w), "resp_1", 3)
	})
	c := f.client(t)
	s, err := c.Create(ctxT(t), CreateRequest{Model: "gpt", Input: []byte(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var last *Response
	var text strings.Builder
	for s.Next() {
		ev := s.Event()
		text.WriteString(ev.Delta)
		if ev.Response != nil {
			last = ev.Response
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
	if !s.Terminal() {
		t.Fatal("Terminal = false")
	}
	if got := text.String(); got != "tok0 tok1 tok2 " {
		t.Errorf("text = %q", got)
	}
	if seq, ok := s.LastSeq(); !ok || seq != 5 {
		t.Errorf("LastSeq = %d, %v; want 5, true", seq, ok)
	}
	if s.ResponseID() != "resp_1" {
		t.Errorf("ResponseID = %q", s.ResponseID())
	}
	if last == nil || last.Status != StatusCompleted || last.Usage == nil || last.Usage.OutputTokens != 3 || last.OutputText != "tok0 tok1 tok2 " {
		t.Errorf("final response = %+v", last)
	}
}

func TestStreamEndings(t *testing.T) {
	t.Parallel()
	created := `event: response.created
data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_x","status":"queued"}}

`
	delta := func(seq string, d string) string {
		return "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\"," + seq + "\"delta\":\"" + d + "\"}\n\n"
	}
	tests := []struct {
		name         string
		body         string
		abort        bool // abort the connection after the body
		wantErr      error
		wantTerminal bool
		wantSeq      int64
		wantHasSeq   bool
		wantText     string
		check        func(t *testing.T, s *Stream, err error)
	}{
		{
			name:    "clean EOF without terminal event",
			body:    created + delta(`"sequence_number":1,`, "a"),
			wantErr: ErrStreamTruncated, wantSeq: 1, wantHasSeq: true, wantText: "a",
		},
		{
			name:    "network error mid-stream",
			body:    created + delta(`"sequence_number":1,`, "a") + "data: {\"type\":\"response.output",
			abort:   true,
			wantErr: ErrStreamTruncated, wantSeq: 1, wantHasSeq: true, wantText: "a",
			check: func(t *testing.T, s *Stream, err error) {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("network cause not kept: %v", err)
				}
			},
		},
		{
			name:    "DONE without terminal event",
			body:    created + "data: [DONE]\n\n",
			wantErr: ErrStreamTruncated, wantSeq: 0, wantHasSeq: true,
		},
		{
			name:    "event cut off before the blank line is dropped",
			body:    created + "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_x\",\"status\":\"completed\"}}\n",
			wantErr: ErrStreamTruncated, wantSeq: 0, wantHasSeq: true,
		},
		{
			name:    "unsequenced events do not move the cursor",
			body:    created + delta("", "a") + delta(`"sequence_number":null,`, "b") + delta(`"sequence_number":1.0,`, "c") + delta("", "d"),
			wantErr: ErrStreamTruncated, wantSeq: 1, wantHasSeq: true, wantText: "abcd",
		},
		{
			name:         "error event is terminal",
			body:         created + `data: {"type":"error","code":"server_error","message":"boom","param":null,"sequence_number":1}` + "\n\n" + delta(`"sequence_number":2,`, "late"),
			wantTerminal: true, wantSeq: 0, wantHasSeq: true, // an error event does not move the resume cursor
			check: func(t *testing.T, s *Stream, err error) {
				if ev := s.Event(); ev.Code != "server_error" || ev.Message != "boom" {
					t.Errorf("error event = %+v", ev)
				}
			},
		},
		{
			// Undocumented keepalive events (openai/openai-node#1964,
			// openai/openai-java#776) come before response.created under load
			// and between events of long responses. They pass through and do
			// not move the resume cursor: whether they are part of the
			// replayable sequence is not documented.
			name: "keepalives before and between events",
			body: `data: {"type":"keepalive","sequence_number":0,"model":"gpt-5.5"}` + "\n\n" +
				"event: keepalive\ndata: {\"type\":\"keepalive\",\"sequence_number\":1}\n\n" +
				strings.Replace(created, `"sequence_number":0`, `"sequence_number":2`, 1) +
				delta(`"sequence_number":3,`, "a") + `data: {"type":"keepalive","sequence_number":9}` + "\n\n" + delta(`"sequence_number":4,`, "b") +
				`data: {"type":"keepalive","sequence_number":10}` + "\n\n",
			wantErr: ErrStreamTruncated, wantSeq: 4, wantHasSeq: true, wantText: "ab",
			check: func(t *testing.T, s *Stream, err error) {
				if s.ResponseID() != "resp_x" {
					t.Errorf("ResponseID = %q", s.ResponseID())
				}
			},
		},
		{
			name:    "keepalives only",
			body:    `data: {"type":"keepalive","sequence_number":0}` + "\n\n" + `data: {"type":"keepalive","sequence_number":1}` + "\n\n",
			wantErr: ErrStreamTruncated, wantSeq: 0, wantHasSeq: false,
		},
		{
			name:    "top-level error frame",
			body:    created + `data: {"error":{"code":"rate_limit_exceeded","message":"slow down","type":"requests"}}` + "\n\n",
			wantSeq: 0, wantHasSeq: true,
			check: func(t *testing.T, s *Stream, err error) {
				var apiErr *APIError
				if !errors.As(err, &apiErr) {
					t.Fatalf("Err = %T %v, want *APIError", err, err)
				}
				if apiErr.Code != "rate_limit_exceeded" || apiErr.Message != "slow down" || apiErr.ResponseID != "resp_x" {
					t.Errorf("APIError = %+v", apiErr)
				}
				if want := "foundry: stream resp_x: rate_limit_exceeded: slow down"; err.Error() != want {
					t.Errorf("Error() = %q, want %q", err.Error(), want)
				}
			},
		},
		{
			name:    "top-level error frame with a string",
			body:    created + `data: {"error":"overloaded"}` + "\n\n",
			wantSeq: 0, wantHasSeq: true,
			check: func(t *testing.T, s *Stream, err error) {
				var apiErr *APIError
				if !errors.As(err, &apiErr) || apiErr.Message != "overloaded" {
					t.Errorf("Err = %v", err)
				}
			},
		},
		{
			name:         "error event with nested details",
			body:         created + `data: {"type":"error","sequence_number":1,"error":{"code":"server_error","message":"nested","param":"x"}}` + "\n\n",
			wantTerminal: true, wantSeq: 0, wantHasSeq: true,
			check: func(t *testing.T, s *Stream, err error) {
				if ev := s.Event(); ev.Code != "server_error" || ev.Message != "nested" || ev.Param != "x" {
					t.Errorf("error event = %+v", ev)
				}
			},
		},
		{
			name:         "failed is terminal",
			body:         created + `data: {"type":"response.failed","sequence_number":1,"response":{"id":"resp_x","status":"failed","error":{"code":"server_error","message":"model crashed"}}}` + "\n\n",
			wantTerminal: true, wantSeq: 1, wantHasSeq: true,
			check: func(t *testing.T, s *Stream, err error) {
				r := s.Event().Response
				if r == nil || r.Error == nil || r.Error.Message != "model crashed" {
					t.Errorf("failed response = %+v", r)
				}
			},
		},
		{
			name:         "incomplete is terminal",
			body:         created + `data: {"type":"response.incomplete","sequence_number":1,"response":{"id":"resp_x","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}` + "\n\n",
			wantTerminal: true, wantSeq: 1, wantHasSeq: true,
			check: func(t *testing.T, s *Stream, err error) {
				if r := s.Event().Response; r.IncompleteReason != "max_output_tokens" {
					t.Errorf("IncompleteReason = %q", r.IncompleteReason)
				}
			},
		},
		{
			name:    "malformed JSON",
			body:    created + "data: {\"type\":\"response.output_text.delta\",\n\n",
			wantErr: ErrMalformedEvent, wantSeq: 0, wantHasSeq: true,
		},
		{
			name:    "wrong field type in a known event",
			body:    created + delta(`"sequence_number":"one",`, "a") + delta(`"sequence_number":1.5,`, "b"),
			wantErr: ErrMalformedEvent, wantSeq: 0, wantHasSeq: true,
		},
		{
			name:    "wrong delta type in a delta event",
			body:    created + `data: {"type":"response.output_text.delta","sequence_number":1,"delta":5}` + "\n\n",
			wantErr: ErrMalformedEvent, wantSeq: 0, wantHasSeq: true,
		},
		{
			name:         "odd nested field type does not lose the terminal event",
			body:         created + `data: {"type":"response.completed","sequence_number":1,"response":{"id":"resp_x","status":"completed","metadata":{"k":1},"usage":{"input_tokens":"2","output_tokens":3}}}` + "\n\n",
			wantTerminal: true, wantSeq: 1, wantHasSeq: true,
			check: func(t *testing.T, s *Stream, err error) {
				r := s.Event().Response
				if err != nil || r == nil || r.Status != StatusCompleted || r.Usage == nil || r.Usage.OutputTokens != 3 {
					t.Errorf("err = %v, response = %+v", err, r)
				}
			},
		},
		{
			name:         "terminal event without a response object",
			body:         created + `data: {"type":"response.incomplete","sequence_number":1}` + "\n\n",
			wantTerminal: true, wantSeq: 1, wantHasSeq: true,
			check: func(t *testing.T, s *Stream, err error) {
				if r := s.Event().Response; r == nil || r.Status != StatusIncomplete {
					t.Errorf("response = %+v", r)
				}
			},
		},
		{
			name:    "odd field type in an unknown event passes",
			body:    created + `data: {"type":"response.future.thing","sequence_number":1,"delta":{"x":1}}` + "\n\n",
			wantErr: ErrStreamTruncated, wantSeq: 1, wantHasSeq: true,
		},
		{
			name:    "comments, multi-line data, CRLF and CR endings",
			body:    ": keep-alive\r\n" + created + "event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\r\ndata: \"sequence_number\":1,\"delta\":\"x\"}\r\n\r\n" + "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"delta\":\"y\"}\r\rid: 7\nretry: 10\n" + delta(`"sequence_number":3,`, "z"),
			wantErr: ErrStreamTruncated, wantSeq: 3, wantHasSeq: true, wantText: "xyz",
		},
		{
			name:    "event name used when type is missing",
			body:    created + "event: response.output_text.delta\ndata: {\"sequence_number\":1,\"delta\":\"n\"}\n\n",
			wantErr: ErrStreamTruncated, wantSeq: 1, wantHasSeq: true, wantText: "n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
				s := startSSE(w)
				s.raw(tt.body)
				if tt.abort {
					panic(http.ErrAbortHandler)
				}
			})
			s, err := f.client(t).Create(ctxT(t), CreateRequest{Model: "m", Input: []byte(`"x"`)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			text, _ := drain(s)
			err = s.Err()
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && tt.check == nil && err != nil {
				t.Errorf("Err = %v, want nil", err)
			}
			if s.Terminal() != tt.wantTerminal {
				t.Errorf("Terminal = %v, want %v", s.Terminal(), tt.wantTerminal)
			}
			if seq, ok := s.LastSeq(); seq != tt.wantSeq || ok != tt.wantHasSeq {
				t.Errorf("LastSeq = %d, %v; want %d, %v", seq, ok, tt.wantSeq, tt.wantHasSeq)
			}
			if text != tt.wantText {
				t.Errorf("text = %q, want %q", text, tt.wantText)
			}
			if tt.check != nil {
				tt.check(t, s, err)
			}
			if s.Next() {
				t.Error("Next after the end = true")
			}
		})
	}
}

func TestStreamContextCancel(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		s := startSSE(w)
		s.raw("data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_c\",\"status\":\"queued\"}}\n\n")
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	cause := errors.New("run cancelled by test")
	ctx, cancel := context.WithCancelCause(ctxT(t))
	s, err := f.client(t).Create(ctx, CreateRequest{Model: "m", Input: []byte(`"x"`)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Next() || s.Event().Type != EventCreated {
		t.Fatalf("first event: %v %v", s.Event().Type, s.Err())
	}
	time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
	if s.Next() {
		t.Fatal("Next = true after cancel")
	}
	if !errors.Is(s.Err(), cause) {
		t.Errorf("Err = %v, want the context cause", s.Err())
	}
	if errors.Is(s.Err(), ErrStreamTruncated) {
		t.Error("a cancelled stream is not reported as truncated")
	}
}

func TestStreamCloseUnblocksNext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		startSSE(w)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	s, err := f.client(t).Create(ctxT(t), CreateRequest{Model: "m", Input: []byte(`"x"`)})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { s.Close() })
	done := make(chan bool)
	go func() { done <- s.Next() }()
	select {
	case got := <-done:
		if got {
			t.Error("Next = true")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next still blocked after Close")
	}
	if s.Err() != nil {
		t.Errorf("Err after Close = %v, want nil", s.Err())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestStreamReportsBackground: response.created tells whether the server
// honoured background=true (Foundry hosted agents answer background false,
// Azure/azure-sdk-for-python#46015); absent is not false.
func TestStreamReportsBackground(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		field      string
		bg, known  bool
		keepalives bool
	}{
		{`"background":true,`, true, true, false},
		{`"background":false,`, false, true, true},
		{``, false, false, false},
	} {
		f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
			s := startSSE(w)
			if tt.keepalives {
				s.raw(`data: {"type":"keepalive","sequence_number":0}` + "\n\n")
			}
			s.raw(`data: {"type":"response.created","sequence_number":1,"response":{"id":"resp_b",` + tt.field + `"status":"in_progress"}}` + "\n\n")
		})
		s, err := f.client(t).Create(ctxT(t), CreateRequest{Model: "m", Input: []byte(`"x"`)})
		if err != nil {
			t.Fatal(err)
		}
		var created *Response
		for s.Next() {
			if ev := s.Event(); ev.Type == EventCreated {
				created = ev.Response
			}
		}
		s.Close()
		if created == nil || created.Background != tt.bg || created.BackgroundKnown != tt.known {
			t.Errorf("%q: response.created = %+v, want Background %v, BackgroundKnown %v", tt.field, created, tt.bg, tt.known)
		}
	}
}
