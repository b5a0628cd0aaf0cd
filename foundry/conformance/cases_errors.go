package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// refused sends a create with the given fields changed and observes the
// refusal ("STATUS TYPE code=C param=P"); a create that is accepted is
// observed as its status, and its stream is not read.
func (e *Endpoint) refused(ctx context.Context, change map[string]any) (string, error) {
	body := e.createBody(nil)
	for k, v := range change {
		body[k] = v
	}
	return e.createObserved(ctx, body, errorObservation)
}

// createObserved posts body as a create: a refusal is observed by
// observe, an accepted create as its status (its stream is not read).
func (e *Endpoint) createObserved(ctx context.Context, body map[string]any, observe func(*http.Response) string) (string, error) {
	res, err := e.do(ctx, http.MethodPost, "responses", body)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	if res.StatusCode < 300 {
		return fmt.Sprintf("%d (accepted)", res.StatusCode), nil
	}
	return observe(res), nil
}

var caseMaxOutputTooSmall = Case{
	Name:   "error: max_output_tokens below 16",
	Want:   "400 invalid_request_error code=integer_below_min_value param=max_output_tokens",
	Source: "openai/openai-openapi CreateResponse.max_output_tokens (minimum 16); OpenAI API reference, Errors (the error object)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		return e.refused(ctx, map[string]any{"max_output_tokens": 1})
	},
}

var caseInputWrongType = Case{
	Name:   "error: input of the wrong type",
	Want:   "400 invalid_request_error code=invalid_type param=input",
	Source: "openai/openai-openapi CreateResponse.input (a string or an array of items); OpenAI API reference, Errors",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		return e.refused(ctx, map[string]any{"input": 42})
	},
}

var caseBackgroundWithoutStore = Case{
	Name: "error: background without store",
	Want: "400 invalid_request_error code=invalid_value param=background",
	Source: "Microsoft Learn \"Azure OpenAI Responses API\", Background tasks, Limitations " +
		"(\"Background mode requires store=true\"); OpenAI guide \"Background mode\"",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		return e.refused(ctx, map[string]any{"background": true, "store": false})
	},
}

var caseUnknownModel = Case{
	Name:         "error: unknown model deployment",
	Want:         "404 code=DeploymentNotFound",
	Source:       "MicrosoftDocs/azure-docs #114013 (404 DeploymentNotFound \"The API deployment for this resource does not exist\")",
	EndpointOnly: "the emulator accepts every model name",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		return e.refused(ctx, map[string]any{"model": "foundryq-conformance-no-such-deployment"})
	},
}

var caseRateLimitHeaders = Case{
	Name: "throttling headers on a create",
	Want: "x-ratelimit-remaining-requests x-ratelimit-remaining-tokens",
	Source: "Microsoft Learn \"Azure OpenAI 429: token and request rate limits explained\" (remaining requests and tokens in " +
		"x-ratelimit-* headers); Microsoft Q&A \"Azure OpenAI Responses API x-ratelimit headers values -1, 0\"",
	EndpointOnly: "the emulator sends x-ratelimit-* only with a 429",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		// A foreground, unstored create: the headers come with its answer.
		res, err := e.do(ctx, http.MethodPost, "responses", e.createBody(map[string]any{"store": false}))
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		if res.StatusCode >= 300 {
			return errorObservation(res), nil
		}
		return headerNames(res.Header, "x-ratelimit-"), nil
	},
}

var caseThrottled = Case{
	Name: "throttled: 429",
	Want: "429 requests code=rate_limit_exceeded; retry-after retry-after-ms; x-ratelimit-remaining-requests",
	Source: "Microsoft Learn \"Azure OpenAI 429: token and request rate limits explained\" " +
		"(429 rate_limit_exceeded with retry-after and retry-after-ms)",
	EmulatorOnly: "a 429 from the service means spending the deployment's quota; the emulator answers one on request (emu_create_status=429)",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		res, err := e.do(ctx, http.MethodPost, "responses", e.createBody(nil, "emu_create_status", "429"))
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		var retry []string
		for _, h := range []string{"Retry-After", "Retry-After-Ms"} {
			if res.Header.Get(h) != "" {
				retry = append(retry, strings.ToLower(h))
			}
		}
		if len(retry) == 0 {
			retry = []string{"no retry-after"}
		}
		return fmt.Sprintf("%s; %s; %s", errorObservation(res), strings.Join(retry, " "), headerNames(res.Header, "x-ratelimit-")), nil
	},
}

// resumeWindow is how long a background response can be streamed again.
const resumeWindow = 5 * time.Minute

var caseResumeWindow = Case{
	Name: "resume: after 5 minutes",
	Want: `resume 400 invalid_request_error "This response can no longer be streamed because it is more than 5 minutes old"; GET 200 completed`,
	Source: "openai/openai-python #2828 (400 \"This response can no longer be streamed because it is more than 5 minutes old\"); " +
		"OpenAI guide \"Background mode\" (polling with GET goes on)",
	EmulatorOnly: "needs the clock moved 5 minutes on; against the service it means waiting",
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		if e.advance == nil {
			return "", errors.New("the endpoint's clock cannot be moved")
		}
		id, _, err := e.streamed(ctx)
		if err != nil {
			return "", err
		}
		e.advance(resumeWindow + time.Second)
		_, _, resume, err := e.call(ctx, http.MethodGet, fmt.Sprintf("responses/%s?stream=true&starting_after=0", id), nil, true)
		if err != nil {
			return "", err
		}
		_, _, get, err := e.call(ctx, http.MethodGet, "responses/"+id, nil, false)
		if err != nil {
			return "", err
		}
		return "resume " + resume + "; GET " + get, nil
	},
}

var caseAgentInstructions = Case{
	Name: "agent run with instructions",
	Want: `400 invalid_request_error code=invalid_payload param=instructions "Not allowed when agent is specified"`,
	Source: "microsoft/agent-framework #5130 (400 invalid_payload \"Not allowed when agent is specified.\", param naming " +
		"the field an agent_reference does not allow; the agent's own instructions, tools and options apply); " +
		"microsoft/agent-framework #2573 (the same answer for temperature and top_p)",
	NeedsAgent: true,
	Run: func(ctx context.Context, e *Endpoint) (string, error) {
		// An agent run in its smallest form, plus the refused field: no
		// model, no max_output_tokens (the agent's settings apply), not
		// streamed. The service refuses it before the agent runs.
		body := e.createBody(map[string]any{
			"agent_reference": map[string]any{"type": "agent_reference", "name": e.agent},
			"instructions":    "Reply in French.",
		})
		delete(body, "model")
		delete(body, "max_output_tokens")
		return e.createObserved(ctx, body, refusalObservation)
	},
}

// refusalObservation reads an error reply: "STATUS TYPE code=C param=P
// "message"", the message without its final period.
func refusalObservation(res *http.Response) string {
	data, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	obs := errorObs(res.StatusCode, data, false)
	var b apiErrorBody
	if json.Unmarshal(data, &b) == nil && b.Error != nil {
		obs += fmt.Sprintf(" %q", strings.TrimSuffix(b.Error.Message, "."))
	}
	return obs
}
