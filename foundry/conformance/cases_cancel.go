package conformance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// readUntil reads frames until one of type typ and returns the response id
// seen so far.
func readUntil(fr *frameReader, typ string) (string, error) {
	id := ""
	for {
		f, err := fr.next()
		if err == io.EOF {
			return id, fmt.Errorf("the stream ended before %s", typ)
		}
		if err != nil {
			return id, err
		}
		if r := f.snapshot(); r != nil && id == "" {
			id = r.ID
		}
		if f.typ == typ {
			if id == "" {
				return "", errNoID
			}
			return id, nil
		}
		if f.terminal() {
			return id, fmt.Errorf("the stream ended (%s) before %s", f.typ, typ)
		}
	}
}

var caseCancelRunning = Case{
	Name: "cancel: a running response, twice",
	Want: "cancel 200 cancelled; again 200 cancelled; GET 200 cancelled",
	Source: "openai/openai-openapi POST /responses/{id}/cancel (200: the Response); Microsoft Learn \"Azure OpenAI Responses API\", " +
		"Cancelling a background task (\"Canceling is idempotent—subsequent calls will return the final response object\"). " +
		"On a fast deployment the response may finish before the cancel arrives (then: cancel 400 ... completed)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		// emu_token_ms keeps the emulator's response generating for 10 s;
		// the service's is cancelled right after response.created, while
		// a background response is usually still queued.
		return e.openAndCall(ctx, "emu_token_ms", "2000", "response.created", cancelCall, againCall, getCall)
	},
}

var caseCancelQueued = Case{
	Name: "cancel: a queued response",
	Want: "GET 200 queued; cancel 200 cancelled; GET 200 cancelled",
	Source: "openai/openai-openapi Response.status (queued); OpenAI guide \"Background mode\" " +
		"(queued and in_progress are not final; any background response can be cancelled)",
	EmulatorOnly: "the service decides how long a response stays queued; the emulator holds one there (emu_queued_ms)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		return e.openAndCall(ctx, "emu_queued_ms", "600000", "response.queued", getCall, cancelCall, getCall)
	},
}

var caseCancelCompleted = Case{
	Name:   "cancel: a completed response",
	Want:   `400 invalid_request_error "Cannot cancel a completed response"`,
	Source: "BerriAI/litellm #39617 (quotes a live run: 400 invalid_request_error \"Cannot cancel a completed response.\")",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		id, _, err := e.streamed(ctx)
		if err != nil {
			return "", err
		}
		_, _, obs, err := e.visible(ctx, http.MethodPost, "responses/"+id+"/cancel", nil, true)
		return obs, err
	},
}

// unknownID looks like a response id and names none.
const unknownID = "resp_" + "00000000000000000000000000000000000000000000000000"

var caseUnknownID = Case{
	Name: "unknown response id",
	Want: "GET 404 invalid_request_error; cancel 404 invalid_request_error",
	Source: "openai/openai-openapi GET and POST .../cancel of /responses/{id} (404 with the Error object); " +
		"the service answers \"Response with id '...' not found.\"",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		_, _, get, err := e.call(ctx, http.MethodGet, "responses/"+unknownID, nil, false)
		if err != nil {
			return "", err
		}
		_, _, cancel, err := e.call(ctx, http.MethodPost, "responses/"+unknownID+"/cancel", nil, false)
		if err != nil {
			return "", err
		}
		return "GET " + get + "; cancel " + cancel, nil
	},
}

// call is one request on a response, for openAndCall.
type call struct{ label, method, suffix string }

var (
	getCall    = call{"GET", http.MethodGet, ""}
	cancelCall = call{"cancel", http.MethodPost, "/cancel"}
	againCall  = call{"again", http.MethodPost, "/cancel"}
)

// openAndCall opens a streamed background create with the emulator
// directive key=value, reads it until the event until (which names the
// response), then makes the calls on the response while the stream is
// open, and joins what each observed.
func (e *Endpoint) openAndCall(ctx context.Context, key, value, until string, calls ...call) (string, error) {
	res, fr, err := e.openStream(ctx, key, value)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	id, err := readUntil(fr, until)
	if err != nil {
		return "", err
	}
	var obs []string
	for _, c := range calls {
		_, _, o, err := e.visible(ctx, c.method, "responses/"+id+c.suffix, nil, true)
		if err != nil {
			return "", err
		}
		obs = append(obs, c.label+" "+o)
	}
	return strings.Join(obs, "; "), nil
}
