package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

var caseCreate = Case{
	Name: "create: background + stream",
	Want: "200 text/event-stream; first response.created, status queued, background true",
	Source: "OpenAI API reference, \"Create a model response\" (a stream opens with response.created); " +
		"OpenAI guide \"Background mode\" and Microsoft Learn \"Azure OpenAI Responses API\", Background tasks (a background response starts queued)",
	Run: observeCreate,
}

func observeCreate(ctx context.Context, e *Endpoint) (string, error) {
	res, err := e.do(ctx, http.MethodPost, "responses", e.createBody(backgroundStream))
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return errorObservation(res), nil
	}
	head := fmt.Sprintf("%d %s", res.StatusCode, mediaType(res.Header))
	frames, err := newFrameReader(res.Body).readAll()
	if err != nil {
		return "", fmt.Errorf("read the stream: %w", err)
	}
	if len(frames) == 0 {
		return head + "; no frame", nil
	}
	first := frames[0]
	r := first.snapshot()
	if r == nil {
		return fmt.Sprintf("%s; first %s, no response", head, first.typ), nil
	}
	bg := "background absent"
	if r.Background != nil {
		bg = fmt.Sprintf("background %t", *r.Background)
	}
	return fmt.Sprintf("%s; first %s, status %s, %s", head, first.typ, r.Status, bg), nil
}

var caseStreamOrder = Case{
	Name: "stream: frames in order",
	Want: "event = type on every frame; sequence_number from 0 without a gap; one terminal event, last: response.completed",
	Source: "openai/openai-openapi ResponseStreamEvent (every event has type and sequence_number; SSE event name = type); " +
		"OpenAI guide \"Background mode\" (sequence_number is the resume cursor)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		_, frames, err := e.streamed(ctx)
		if err != nil {
			return "", err
		}
		return orderObservation(frames), nil
	},
}

// orderObservation checks the framing of a whole stream and says the first
// thing wrong, or the summary the Want of caseStreamOrder states.
func orderObservation(frames []frame) string {
	if len(frames) == 0 {
		return "no frame"
	}
	terminals := 0
	for i, f := range frames {
		if f.event != f.typ {
			return fmt.Sprintf("frame %d: event %q but type %q", i, f.event, f.typ)
		}
		if !f.hasSeq {
			return fmt.Sprintf("frame %d (%s) has no sequence_number", i, f.typ)
		}
		if i == 0 && f.seq != 0 {
			return fmt.Sprintf("sequence_number from %d", f.seq)
		}
		if i > 0 && f.seq != frames[i-1].seq+1 {
			return fmt.Sprintf("sequence_number %d after %d", f.seq, frames[i-1].seq)
		}
		if f.terminal() {
			terminals++
		}
	}
	last := frames[len(frames)-1]
	if !last.terminal() {
		return fmt.Sprintf("ends without a terminal event (last: %s)", last.typ)
	}
	return fmt.Sprintf("event = type on every frame; sequence_number from 0 without a gap; %s, last: %s",
		plural(terminals, "terminal event"), last.typ)
}

func plural(n int, what string) string {
	switch n {
	case 1:
		return "one " + what
	default:
		return fmt.Sprintf("%d %ss", n, what)
	}
}

// resumeAfter is the starting_after the resume case uses.
const resumeAfter = 2

var caseResume = Case{
	Name: "resume: starting_after",
	Want: fmt.Sprintf("200 text/event-stream; replays the events after %d as first sent, to the terminal event", resumeAfter),
	Source: "OpenAI guide \"Background mode\", Resuming streams (GET /responses/{id}?stream=true&starting_after=N); " +
		"Microsoft Learn \"Azure OpenAI Responses API\", the same call with curl",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		id, frames, err := e.streamed(ctx)
		if err != nil {
			return "", err
		}
		res, err := e.resume(ctx, id, resumeAfter)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return errorObservation(res), nil
		}
		head := fmt.Sprintf("%d %s", res.StatusCode, mediaType(res.Header))
		replay, err := newFrameReader(res.Body).readAll()
		if err != nil {
			return "", fmt.Errorf("read the resumed stream: %w", err)
		}
		var tail []frame
		for _, f := range frames {
			if f.hasSeq && f.seq > resumeAfter {
				tail = append(tail, f)
			}
		}
		if d := replayDifference(tail, replay); d != "" {
			return head + "; " + d, nil
		}
		return fmt.Sprintf("%s; replays the events after %d as first sent, to the terminal event", head, resumeAfter), nil
	},
}

// resume opens GET responses/{id}?stream=true&starting_after=after,
// waiting out Azure's 404s right after a create.
func (e *Endpoint) resume(ctx context.Context, id string, after int) (*http.Response, error) {
	path := fmt.Sprintf("responses/%s?stream=true&starting_after=%d", id, after)
	for range 30 { // foundry.NotFoundGrace at 2 s a try
		res, err := e.do(ctx, http.MethodGet, path, nil)
		if err != nil || res.StatusCode != http.StatusNotFound {
			return res, err
		}
		res.Body.Close()
		if err := sleep(ctx, notFoundPause); err != nil {
			return nil, err
		}
	}
	return e.do(ctx, http.MethodGet, path, nil)
}

// replayDifference says how a replay differs from the frames first sent
// (types, sequence numbers and delta text; obfuscation padding may differ).
func replayDifference(want, got []frame) string {
	for i := 0; i < len(want) && i < len(got); i++ {
		w, g := want[i], got[i]
		if w.typ != g.typ || w.seq != g.seq || deltaText([]frame{w}) != deltaText([]frame{g}) {
			return fmt.Sprintf("frame %d: %s #%d, first sent as %s #%d", i, g.typ, g.seq, w.typ, w.seq)
		}
	}
	switch {
	case len(got) < len(want):
		return fmt.Sprintf("replays %d of the %d events after %d", len(got), len(want), resumeAfter)
	case len(got) > len(want):
		return fmt.Sprintf("replays %d events, %d were sent after %d", len(got), len(want), resumeAfter)
	}
	return ""
}

var caseRetrieve = Case{
	Name:   "retrieve",
	Want:   "200 object response, status completed, background true, output text = the streamed deltas",
	Source: "OpenAI API reference, \"Get a model response\"; OpenAI guide \"Background mode\" (poll with GET until a final status)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		id, frames, err := e.streamed(ctx)
		if err != nil {
			return "", err
		}
		status, r, obs, err := e.visible(ctx, http.MethodGet, "responses/"+id, nil, false)
		if err != nil || r == nil {
			return obs, err
		}
		bg := "background absent"
		if r.Background != nil {
			bg = fmt.Sprintf("background %t", *r.Background)
		}
		text := "output text = the streamed deltas"
		if got, want := r.text(), deltaText(frames); got != want {
			text = fmt.Sprintf("output text %q, deltas %q", clip(got), clip(want))
		}
		return fmt.Sprintf("%d object %s, status %s, %s, %s", status, r.Object, r.Status, bg, text), nil
	},
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return strings.TrimSpace(s)
}

// notFoundWindowBound bounds the 404 window case: the stream, then a
// minute of GETs (Endpoint.notFoundGrace).
const notFoundWindowBound = 90 * time.Second

var caseNotFoundWindow = Case{
	Name: "GET right after a streamed create",
	Want: "visible (200) within a minute; 404s in between are error objects",
	Source: "dotnet/extensions #7704 (on Azure's /openai/v1 a response just streamed answered 404 for up to 32.7 s, " +
		"79 samples, then 200); openai/openai-openapi GET /responses/{id} (404 with the Error object). " +
		"The emulator answers 404 for as long as emu_get_404_ms asks (2 s here)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		obs, _, err := e.getAfterStream(ctx)
		return obs, err
	},
}

// getAfterStream streams a background create to its end, then GETs the
// response until it answers other than 404, for at most e.notFoundGrace,
// and says whether it became visible and whether each 404 was an error
// object. notFound counts the 404s.
func (e *Endpoint) getAfterStream(ctx context.Context) (obs string, notFound int, err error) {
	ctx, cancel := context.WithTimeout(ctx, notFoundWindowBound)
	defer cancel()
	id, _, err := e.streamed(ctx, "emu_get_404_ms", "2000")
	if err != nil {
		return "", 0, err
	}
	deadline := time.Now().Add(e.notFoundGrace)
	between := "404s in between are error objects"
	for {
		status, data, err := e.get(ctx, "responses/"+id)
		if err != nil {
			return "", notFound, err
		}
		switch {
		case status == http.StatusOK:
			return "visible (200) within a minute; " + between, notFound, nil
		case status != http.StatusNotFound:
			return "GET " + errorObs(status, data, false) + "; " + between, notFound, nil
		}
		notFound++
		if !isErrorObject(data) && !strings.HasPrefix(between, "a 404") { // the first one says it
			between = "a 404 in between is not an error object (" + errorObs(status, data, false) + ")"
		}
		if time.Now().After(deadline) {
			return "still 404 after a minute; " + between, notFound, nil
		}
		if err := sleep(ctx, notFoundPause); err != nil {
			return "", notFound, err
		}
	}
}

// get sends a GET and returns the status and the body.
func (e *Endpoint) get(ctx context.Context, path string) (int, []byte, error) {
	res, err := e.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return res.StatusCode, nil, fmt.Errorf("read the GET %s reply: %w", path, err)
	}
	return res.StatusCode, data, nil
}

// isErrorObject reports whether data is the API's error object: {"error":
// {"message": ...}} with a message.
func isErrorObject(data []byte) bool {
	var b apiErrorBody
	return json.Unmarshal(data, &b) == nil && b.Error != nil && strings.TrimSpace(b.Error.Message) != ""
}
