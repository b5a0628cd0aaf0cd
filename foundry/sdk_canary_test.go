package foundry

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestSDKPitfallsStillPresent pins the openai-go v3.98.0 behaviours this package
// works around (DESIGN.md, "Foundry facts that bite"). When an upgrade fixes one,
// its subtest fails: the workaround can then be reconsidered.
func TestSDKPitfallsStillPresent(t *testing.T) {
	t.Parallel()
	sdk := func(f *fake) openai.Client {
		return openai.NewClient(option.WithBaseURL(f.baseURL()), option.WithAPIKey("k"), option.WithHTTPClient(&http.Client{}))
	}
	t.Run("create is retried", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
			w.Header().Set("Retry-After-Ms", "1")
			writeAPIError(w, 500, "server_error", "boom")
		})
		c := sdk(f)
		s := c.Responses.NewStreaming(ctxT(t), responses.ResponseNewParams{Model: "m", Background: openai.Bool(true)})
		for s.Next() {
		}
		if n := len(f.requests()); n != 3 {
			t.Errorf("openai-go sent %d creates for one call; Create's WithMaxRetries(0) may no longer be needed", n)
		}
	})
	t.Run("GetStreaming puts stream in a GET body", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
			writeJSON(w, 200, respObj("resp_1", "in_progress", nil))
		})
		c := sdk(f)
		s := c.Responses.GetStreaming(ctxT(t), "resp_1", responses.ResponseGetParams{StartingAfter: openai.Int(3)})
		n := 0
		for s.Next() {
			n++
		}
		r := f.requests()[0]
		if strings.Contains(r.Query, "stream=true") || !strings.Contains(string(r.Body), `"stream":true`) {
			t.Errorf("GetStreaming now sends query %q body %q: openai/openai-go#660 fixed?", r.Query, r.Body)
		}
		if n != 0 || s.Err() != nil {
			t.Errorf("JSON reply gave %d events, err %v", n, s.Err())
		}
	})
	t.Run("truncated stream ends without error", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
			startSSE(w).raw(`data: {"type":"response.output_text.delta","sequence_number":1,"delta":"a"}` + "\n\n")
		})
		c := sdk(f)
		s := c.Responses.NewStreaming(ctxT(t), responses.ResponseNewParams{Model: "m"}, option.WithMaxRetries(0))
		for s.Next() {
		}
		if s.Err() != nil {
			t.Errorf("ssestream now reports %v for a stream without a terminal event", s.Err())
		}
	})
	t.Run("openai.Error drops the message", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, "/openai/v1", func(w http.ResponseWriter, r *http.Request, body []byte) {
			writeAPIError(w, 400, "", "This response can no longer be streamed because it is more than 5 minutes old.")
		})
		c := sdk(f)
		_, err := c.Responses.Get(context.Background(), "resp_1", responses.ResponseGetParams{}, option.WithMaxRetries(0))
		var oe *openai.Error
		if !errors.As(err, &oe) || strings.Contains(err.Error(), "5 minutes") || oe.Message == "" {
			t.Errorf("openai.Error now prints %q", err)
		}
	})
}
