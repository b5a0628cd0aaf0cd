package foundrytest

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// failCodeList is the accepted emu_fail_code values, sorted, for messages.
func failCodeList() string {
	codes := make([]string, 0, len(failCodes))
	for c := range failCodes {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	return strings.Join(codes, ", ")
}

// Metadata keys that script a response (see the package doc). Values are
// decimal strings, as metadata values are strings.
const (
	// KeyTokens is the number of text tokens to generate.
	KeyTokens = "emu_tokens"
	// KeyTokenMS is the pause before each token, in milliseconds.
	KeyTokenMS = "emu_token_ms"
	// KeyToolMS adds one MCP tool call of that many milliseconds before the text.
	KeyToolMS = "emu_tool_ms"
	// KeyCreatedMS delays the first event (response.created) by that many milliseconds.
	KeyCreatedMS = "emu_created_ms"
	// KeyFailAfter emits response.failed after that many events.
	KeyFailAfter = "emu_fail_after"
	// KeyDropAfter cuts the create stream's connection after that many events.
	KeyDropAfter = "emu_drop_after"
	// KeyCreateStatus answers the create with that HTTP error status.
	KeyCreateStatus = "emu_create_status"
	// KeyCreateStatusTimes limits KeyCreateStatus to the first that many
	// creates received for the run id (metadata.run_id); later ones are
	// served: a transient 429 or 5xx that a retry clears.
	KeyCreateStatusTimes = "emu_create_status_times"
	// KeyToolFail, set to 1, makes the tool call fail.
	KeyToolFail = "emu_tool_fail"
	// KeyFunctionCalls is how many function_call items a scripted call to a
	// function tool ends the response with (1 to 8; default 1): the model
	// calls functions in parallel unless parallel_tool_calls is false
	// (OpenAI function calling guide, "Parallel function calling").
	KeyFunctionCalls = "emu_function_calls"
	// maxFunctionCalls bounds KeyFunctionCalls.
	maxFunctionCalls = 8
	// KeyCompleteDespiteCancel, set to 1, lets the response complete after an
	// accepted cancel.
	KeyCompleteDespiteCancel = "emu_complete_despite_cancel"
	// KeyKeepaliveMS is the interval of the keepalive events sent while
	// response.created is held back (emu_created_ms).
	KeyKeepaliveMS = "emu_keepalive_ms"
	// KeyGet404MS makes GET, resume and cancel of the response answer 404
	// for that many milliseconds after it was created.
	KeyGet404MS = "emu_get_404_ms"
	// KeyErrorAfter ends the create stream with an "error" event after that
	// many events; the response goes on.
	KeyErrorAfter = "emu_error_after"
	// KeyErrorFail, set to 1 with KeyErrorAfter, makes the response fail at
	// that point too.
	KeyErrorFail = "emu_error_fail"
	// KeyFailCode is the error code of the failure emu_fail_after or
	// emu_error_fail cause (default server_error).
	KeyFailCode = "emu_fail_code"
	// KeyHostedAgent, set to 1 on an agent request, makes the agent a hosted
	// agent (as does an agent name starting with HostedAgentPrefix).
	KeyHostedAgent = "emu_hosted_agent"
	// KeyQueuedMS keeps a background response queued for that many
	// milliseconds after response.queued, with keepalive events meanwhile.
	KeyQueuedMS = "emu_queued_ms"
	// KeySilentAfter makes every stream of the response go silent (no frame,
	// not even a keepalive) after that many text tokens, while GET shows it
	// in_progress: the generation pauses until KeySilentMS ends or the
	// response ends otherwise (cancel, delete, close).
	KeySilentAfter = "emu_silent_after"
	// KeySilentMS, with KeySilentAfter, ends the silence after that many
	// milliseconds; the generation and its streams then go on.
	KeySilentMS = "emu_silent_ms"
	// KeyCancelFailMS makes cancel calls answer 500 server_error, cancelling
	// nothing, for that many milliseconds from the first cancel call received
	// for the response.
	KeyCancelFailMS = "emu_cancel_fail_ms"
	// KeyCancelHangMS makes cancel calls hang, then answer 504 and cancel
	// nothing, for that many milliseconds from the first cancel call received
	// for the response.
	KeyCancelHangMS = "emu_cancel_hang_ms"
	// KeyContentFilter makes Azure's content filter act: "prompt" answers
	// the create 400 content_filter with an innererror; "stream" stops the
	// text half way with response.failed (error null) and then an error
	// event content_policy_violation; "incomplete" stops it half way with
	// response.incomplete, reason content_filter.
	KeyContentFilter = "emu_content_filter"
	// KeyRefusal, set to 1, makes the model refuse: the message's content
	// part is a refusal, streamed as response.refusal.delta events.
	KeyRefusal = "emu_refusal"
	// KeyErrorFirst, set to 1, opens the create stream with an error event
	// insufficient_quota, then response.failed carrying it.
	KeyErrorFirst = "emu_error_first"
	// KeyListToolsFail, set to 1, makes the listing of the first MCP
	// server's tools fail (424 from the MCP server); the response fails.
	KeyListToolsFail = "emu_list_tools_fail"
	// KeyShouldRetry, "true" or "false", adds an x-should-retry header to
	// the error emu_create_status answers.
	KeyShouldRetry = "emu_should_retry"
	// KeyKeepaliveEvery sends a keepalive event after every that many text
	// tokens, in the middle of the text.
	KeyKeepaliveEvery = "emu_keepalive_every"
)

// emu_content_filter values.
const (
	filterPrompt     = "prompt"
	filterStream     = "stream"
	filterIncomplete = "incomplete"
)

// HostedAgentPrefix marks agent names the emulator treats as Foundry hosted
// agents, which ignore background (see KeyHostedAgent).
const HostedAgentPrefix = "hosted-"

// failCodes are the response error codes emu_fail_code accepts, with the
// message the failure carries: the ResponseError codes of the OpenAI API
// reference.
var failCodes = map[string]string{
	"server_error":         failedMessage,
	"rate_limit_exceeded":  "Rate limit reached for this deployment. Please try again later.",
	"invalid_prompt":       "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
	"vector_store_timeout": "The vector store search timed out.",
	"bio_policy":           "This request was blocked by a safety policy.",
	"invalid_image":        "The image is invalid.",
}

const (
	defaultToolName    = "emulator_tool"
	defaultServerLabel = "emulator"
	toolDisabled       = time.Duration(-1)
	noLimit            = -1
)

// scenario is what the metadata of one create request scripts.
type scenario struct {
	tokens                int
	tokenDelay            time.Duration
	toolDelay             time.Duration // toolDisabled: no tool call
	createdDelay          time.Duration
	failAfter             int // noLimit, or the number of events before response.failed
	dropAfter             int // noLimit, or the number of events after which the create stream is cut
	createStatus          int // 0, or the HTTP status answered to the create
	createStatusTimes     int // noLimit, or how many creates of the run id get createStatus
	toolFail              bool
	functionCalls         int // function_call items of a scripted call to a function tool
	completeDespiteCancel bool
	keepalive             time.Duration // interval of keepalives before response.created
	get404                time.Duration // GET/resume/cancel answer 404 this long after creation
	errorAfter            int           // noLimit, or the number of events before the create stream's error event
	failCode              string        // the code of a scripted failure
	hosted                bool          // a hosted agent: background is ignored
	queuedDelay           time.Duration // how long a background response stays queued after response.queued
	silentAfter           int           // noLimit, or the number of text tokens after which the streams go silent
	silentFor             time.Duration // silentForever, or how long the silence lasts
	cancelFail            time.Duration // cancel calls answer 500 this long from the first one
	cancelHang            time.Duration // cancel calls hang (then 504) this long from the first one
	contentFilter         string        // "", or an emu_content_filter value
	refusal               bool          // the model refuses
	errorFirst            bool          // the stream opens with an insufficient_quota error
	listToolsFail         bool          // listing the first MCP server's tools fails
	shouldRetry           string        // "", "true" or "false": x-should-retry on emu_create_status answers
	keepaliveEvery        int           // 0, or the text tokens between two keepalives
}

// silentForever is the silence of emu_silent_after without emu_silent_ms:
// it lasts until the response ends otherwise.
const silentForever = time.Duration(-1)

// parseScenario reads the emu_* keys of md; defaults come from cfg.
func parseScenario(md map[string]string, cfg Config) (scenario, *apiError) {
	sc := scenario{
		tokens:            cfg.DefaultTokens,
		tokenDelay:        cfg.DefaultTokenDelay,
		toolDelay:         toolDisabled,
		functionCalls:     1,
		failAfter:         noLimit,
		dropAfter:         noLimit,
		errorAfter:        noLimit,
		createStatusTimes: noLimit,
		silentAfter:       noLimit,
		silentFor:         silentForever,
		keepalive:         cfg.KeepaliveInterval,
		failCode:          failedCode,
	}
	var aerr *apiError
	intKey := func(key string, max int64, set func(int64)) {
		v, ok := md[key]
		if !ok || aerr != nil {
			return
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > max {
			aerr = invalidRequest("metadata."+key, "invalid_value",
				"Invalid value for 'metadata.%s': %q. The emulator expects an integer in [0, %d].", key, v, max)
			return
		}
		set(n)
	}
	maxMS := MaxScenarioDelay.Milliseconds()
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	intKey(KeyTokens, int64(cfg.MaxTokens), func(n int64) { sc.tokens = int(n) })
	intKey(KeyTokenMS, maxMS, func(n int64) { sc.tokenDelay = ms(n) })
	intKey(KeyToolMS, maxMS, func(n int64) { sc.toolDelay = ms(n) })
	intKey(KeyCreatedMS, maxMS, func(n int64) { sc.createdDelay = ms(n) })
	intKey(KeyFailAfter, 1<<31-1, func(n int64) { sc.failAfter = int(n) })
	intKey(KeyDropAfter, 1<<31-1, func(n int64) { sc.dropAfter = int(n) })
	intKey(KeyCreateStatus, 599, func(n int64) { sc.createStatus = int(n) })
	intKey(KeyCreateStatusTimes, 1<<31-1, func(n int64) { sc.createStatusTimes = int(n) })
	intKey(KeyToolFail, 1, func(n int64) { sc.toolFail = n == 1 })
	intKey(KeyFunctionCalls, maxFunctionCalls, func(n int64) { sc.functionCalls = max(int(n), 1) })
	intKey(KeyCompleteDespiteCancel, 1, func(n int64) { sc.completeDespiteCancel = n == 1 })
	intKey(KeyKeepaliveMS, maxMS, func(n int64) { sc.keepalive = ms(n) })
	intKey(KeyGet404MS, maxMS, func(n int64) { sc.get404 = ms(n) })
	intKey(KeyErrorAfter, 1<<31-1, func(n int64) { sc.errorAfter = int(n) })
	var errorFail bool
	intKey(KeyErrorFail, 1, func(n int64) { errorFail = n == 1 })
	intKey(KeyHostedAgent, 1, func(n int64) { sc.hosted = n == 1 })
	intKey(KeyQueuedMS, maxMS, func(n int64) { sc.queuedDelay = ms(n) })
	intKey(KeySilentAfter, int64(cfg.MaxTokens), func(n int64) { sc.silentAfter = int(n) })
	intKey(KeySilentMS, maxMS, func(n int64) { sc.silentFor = ms(n) })
	intKey(KeyCancelFailMS, maxMS, func(n int64) { sc.cancelFail = ms(n) })
	intKey(KeyCancelHangMS, maxMS, func(n int64) { sc.cancelHang = ms(n) })
	intKey(KeyRefusal, 1, func(n int64) { sc.refusal = n == 1 })
	intKey(KeyErrorFirst, 1, func(n int64) { sc.errorFirst = n == 1 })
	intKey(KeyListToolsFail, 1, func(n int64) { sc.listToolsFail = n == 1 })
	intKey(KeyKeepaliveEvery, int64(cfg.MaxTokens), func(n int64) { sc.keepaliveEvery = int(n) })
	if aerr != nil {
		return scenario{}, aerr
	}
	if aerr := sc.parseChoices(md); aerr != nil {
		return scenario{}, aerr
	}
	if v, ok := md[KeyFailCode]; ok {
		if _, known := failCodes[v]; !known {
			return scenario{}, invalidRequest("metadata."+KeyFailCode, "invalid_value",
				"Invalid value for 'metadata.%s': %q. The emulator expects one of %s.", KeyFailCode, v, failCodeList())
		}
		sc.failCode = v
	}
	if sc.keepalive <= 0 {
		return scenario{}, invalidRequest("metadata."+KeyKeepaliveMS, "invalid_value",
			"Invalid value for 'metadata.%s': the keepalive interval must be at least 1 ms.", KeyKeepaliveMS)
	}
	if errorFail {
		if sc.errorAfter == noLimit {
			return scenario{}, invalidRequest("metadata."+KeyErrorFail, "invalid_value",
				"Invalid value for 'metadata.%s': it needs '%s'.", KeyErrorFail, KeyErrorAfter)
		}
		if sc.failAfter == noLimit || sc.failAfter > sc.errorAfter {
			sc.failAfter = sc.errorAfter
		}
	}
	if sc.silentFor != silentForever && sc.silentAfter == noLimit {
		return scenario{}, invalidRequest("metadata."+KeySilentMS, "invalid_value",
			"Invalid value for 'metadata.%s': it needs '%s'.", KeySilentMS, KeySilentAfter)
	}
	if sc.createStatus != 0 && sc.createStatus < 400 {
		return scenario{}, invalidRequest("metadata."+KeyCreateStatus, "invalid_value",
			"Invalid value for 'metadata.%s': %d. The emulator expects an HTTP error status in [400, 599].",
			KeyCreateStatus, sc.createStatus)
	}
	if sc.createStatusTimes != noLimit && sc.createStatus == 0 {
		return scenario{}, invalidRequest("metadata."+KeyCreateStatusTimes, "invalid_value",
			"Invalid value for 'metadata.%s': it needs '%s'.", KeyCreateStatusTimes, KeyCreateStatus)
	}
	if sc.toolFail && sc.toolDelay == toolDisabled {
		sc.toolDelay = 0
	}
	return sc, nil
}

// parseChoices reads the keys whose values are words.
func (sc *scenario) parseChoices(md map[string]string) *apiError {
	choice := func(key string, set *string, allowed ...string) *apiError {
		v, ok := md[key]
		if !ok {
			return nil
		}
		for _, a := range allowed {
			if v == a {
				*set = v
				return nil
			}
		}
		return invalidRequest("metadata."+key, "invalid_value",
			"Invalid value for 'metadata.%s': %q. The emulator expects one of %s.", key, v, strings.Join(allowed, ", "))
	}
	if aerr := choice(KeyContentFilter, &sc.contentFilter, filterPrompt, filterStream, filterIncomplete); aerr != nil {
		return aerr
	}
	return choice(KeyShouldRetry, &sc.shouldRetry, "true", "false")
}
