package conformance

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// foregroundUnstored is a create answered in one JSON reply and not kept:
// the cheapest create that still spends tokens as a run does.
var foregroundUnstored = map[string]any{"store": false}

// requestIDHeaders are the headers every answer of the service carries, by
// which Azure support finds a request.
var requestIDHeaders = []string{"apim-request-id", "x-request-id"}

var caseRequestIDs = Case{
	Name: "request ids on a create",
	Want: "apim-request-id x-request-id",
	Source: "Microsoft Q&A \"X-Request-Id\" (Azure support asks for x-request-id and apim-request-id); " +
		"OpenAI API reference, \"Debugging requests\" (every answer has x-request-id)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		res, err := e.do(ctx, http.MethodPost, "responses", e.createBody(foregroundUnstored))
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		if res.StatusCode >= 300 {
			return errorObservation(res), nil
		}
		var seen []string
		for _, h := range requestIDHeaders {
			if strings.TrimSpace(res.Header.Get(h)) != "" {
				seen = append(seen, h)
			} else {
				seen = append(seen, "no "+h)
			}
		}
		return strings.Join(seen, " "), nil
	},
}

var caseObfuscation = Case{
	Name: "stream: obfuscation on text deltas",
	Want: "default: on every delta; include_obfuscation false: on none",
	Source: "openai-go v3.98.0 ResponseNewParamsStreamOptions (include_obfuscation: \"When true, stream obfuscation will be " +
		"enabled ... random characters to an obfuscation field on streaming delta events\"; the service's default is true)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		var obs []string
		for _, v := range []struct {
			label string
			extra map[string]any
		}{
			{"default", map[string]any{"stream": true, "store": false}},
			{"include_obfuscation false", map[string]any{"stream": true, "store": false,
				"stream_options": map[string]any{"include_obfuscation": false}}},
		} {
			o, err := e.obfuscation(ctx, v.extra)
			if err != nil {
				return "", err
			}
			obs = append(obs, v.label+": "+o)
		}
		return strings.Join(obs, "; "), nil
	},
}

// obfuscation streams a create with extra and says which of its text
// deltas carry a non-empty obfuscation field.
func (e *Endpoint) obfuscation(ctx context.Context, extra map[string]any) (string, error) {
	res, err := e.do(ctx, http.MethodPost, "responses", e.createBody(extra))
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return errorObservation(res), nil
	}
	frames, err := newFrameReader(res.Body).readAll()
	if err != nil {
		return "", fmt.Errorf("read the stream: %w", err)
	}
	deltas, with := 0, 0
	for _, f := range frames {
		if f.typ != "response.output_text.delta" {
			continue
		}
		deltas++
		if s, ok := f.str("obfuscation"); ok && s != "" {
			with++
		}
	}
	switch {
	case deltas == 0:
		return "no text delta", nil
	case with == deltas:
		return "on every delta", nil
	case with == 0:
		return "on none", nil
	}
	return fmt.Sprintf("on %d of %d deltas", with, deltas), nil
}

var caseKeepaliveMidStream = Case{
	Name: "stream: keepalive between text deltas",
	Want: "keepalive between text deltas; event = type on every frame; sequence_number from 0 without a gap; " +
		"one terminal event, last: response.completed",
	Source: "openai/openai-node #1964 (a long stream carries {\"type\":\"keepalive\",\"sequence_number\":466} among its events; " +
		"openai/openai-node PR #1965 ignores them)",
	EmulatorOnly: "the service sends them when a stream is slow (a long reasoning model), which is neither cheap nor " +
		"certain; the emulator sends one after every N tokens (emu_keepalive_every)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		_, frames, err := e.streamed(ctx, "emu_keepalive_every", "2")
		if err != nil {
			return "", err
		}
		first, last, between := -1, -1, 0
		for i, f := range frames {
			if f.typ == "response.output_text.delta" {
				if first < 0 {
					first = i
				}
				last = i
			}
		}
		for i := first + 1; first >= 0 && i < last; i++ {
			if frames[i].typ == "keepalive" {
				between++
			}
		}
		where := "keepalive between text deltas"
		if between == 0 {
			where = "no keepalive between text deltas"
		}
		return where + "; " + orderObservation(frames), nil
	},
}

var caseShouldRetry = Case{
	Name: "error: x-should-retry false",
	Want: "500 server_error; x-should-retry false",
	Source: "openai-go internal/requestconfig/requestconfig.go, shouldRetry (x-should-retry: \"false\" on an answer " +
		"is obeyed over its status: a 500 is then not retried)",
	EmulatorOnly: "the service decides when to send it with an error, which cannot be triggered on purpose; " +
		"the emulator adds it to the error it answers (emu_create_status=500, emu_should_retry=false)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		res, err := e.do(ctx, http.MethodPost, "responses",
			e.createBody(nil, "emu_create_status", "500", "emu_should_retry", "false"))
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		if res.StatusCode < 300 {
			return fmt.Sprintf("%d (accepted)", res.StatusCode), nil
		}
		retry := "no x-should-retry"
		if v := res.Header.Get("X-Should-Retry"); v != "" {
			retry = "x-should-retry " + v
		}
		return errorObservation(res) + "; " + retry, nil
	},
}
