package foundry

import (
	"errors"
	"net/http"
	"testing"
)

func TestResumeRequest(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/api/projects/p/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Query().Get("stream") != "true" {
			// What a real server does without stream=true in the query: plain JSON.
			writeJSON(w, 200, respObj("resp_r", "in_progress", nil))
			return
		}
		s := startSSE(w)
		s.raw(`data: {"type":"response.output_text.delta","sequence_number":8,"delta":"b"}` + "\n\n")
		s.raw(`data: {"type":"response.completed","sequence_number":9,"response":{"id":"resp_r","status":"completed"}}` + "\n\n")
	})
	c := f.client(t)
	s, err := c.Resume(ctxT(t), "resp_r", 7)
	if err != nil {
		t.Fatal(err)
	}
	if seq, ok := s.LastSeq(); seq != 7 || !ok {
		t.Errorf("initial LastSeq = %d, %v; want 7, true", seq, ok)
	}
	text, _ := drain(s)
	if s.Err() != nil || !s.Terminal() || text != "b" {
		t.Errorf("resume: text=%q terminal=%v err=%v", text, s.Terminal(), s.Err())
	}
	if seq, _ := s.LastSeq(); seq != 9 {
		t.Errorf("LastSeq = %d, want 9", seq)
	}
	r := f.requests()[0]
	if r.Method != http.MethodGet || r.Path != "/api/projects/p/openai/v1/responses/resp_r" || len(r.Body) != 0 {
		t.Errorf("request = %s %s body=%q", r.Method, r.Path, r.Body)
	}
	if r.Query != "include_obfuscation=false&starting_after=7&stream=true" {
		t.Errorf("query = %q, want stream and starting_after in the query", r.Query)
	}

	// after < 0: from the start, no starting_after.
	s, err = c.Resume(ctxT(t), "resp_r", -1)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, ok := s.LastSeq(); ok {
		t.Error("LastSeq known for a resume from the start")
	}
	if q := f.requests()[1].Query; q != "include_obfuscation=false&stream=true" {
		t.Errorf("query = %q, want stream=true and include_obfuscation=false only", q)
	}
}

func TestResumeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		msg    string
		want   error
	}{
		{"expired", 400, "This response can no longer be streamed because it is more than 5 minutes old.", ErrResumeExpired},
		{"not background", 400, "This response cannot be streamed because it was not created with background=true.", ErrNotBackground},
		{"unknown id", 404, "Response with id 'resp_x' not found.", ErrNotFound},
		{"bad key", 401, "Access denied due to invalid subscription key.", ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
				writeAPIError(w, tt.status, "", tt.msg)
			})
			_, err := f.client(t).Resume(ctxT(t), "resp_x", 3)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			for _, other := range []error{ErrResumeExpired, ErrNotBackground, ErrNotFound, ErrUnauthorized} {
				if other != tt.want && errors.Is(err, other) {
					t.Errorf("err also matches %v", other)
				}
			}
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Message != tt.msg || apiErr.Op != "resume" || apiErr.ResponseID != "resp_x" {
				t.Errorf("APIError = %+v", apiErr)
			}
		})
	}
}

func TestResumeJSONReplyIsAnError(t *testing.T) {
	t.Parallel()
	f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
		writeJSON(w, 200, respObj("resp_j", "in_progress", nil))
	})
	_, err := f.client(t).Resume(ctxT(t), "resp_j", 0)
	if !errors.Is(err, ErrNotStreaming) {
		t.Errorf("err = %v, want ErrNotStreaming", err)
	}
}
