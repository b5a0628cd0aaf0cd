package foundrytest

import (
	"strconv"
	"time"
)

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
	// KeyToolFail, set to 1, makes the tool call fail.
	KeyToolFail = "emu_tool_fail"
	// KeyCompleteDespiteCancel, set to 1, lets the response complete after an
	// accepted cancel.
	KeyCompleteDespiteCancel = "emu_complete_despite_cancel"
)

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
	toolFail              bool
	completeDespiteCancel bool
}

// parseScenario reads the emu_* keys of md; defaults come from cfg.
func parseScenario(md map[string]string, cfg Config) (scenario, *apiError) {
	sc := scenario{
		tokens:     cfg.DefaultTokens,
		tokenDelay: cfg.DefaultTokenDelay,
		toolDelay:  toolDisabled,
		failAfter:  noLimit,
		dropAfter:  noLimit,
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
	intKey(KeyToolFail, 1, func(n int64) { sc.toolFail = n == 1 })
	intKey(KeyCompleteDespiteCancel, 1, func(n int64) { sc.completeDespiteCancel = n == 1 })
	if aerr != nil {
		return scenario{}, aerr
	}
	if sc.createStatus != 0 && sc.createStatus < 400 {
		return scenario{}, invalidRequest("metadata."+KeyCreateStatus, "invalid_value",
			"Invalid value for 'metadata.%s': %d. The emulator expects an HTTP error status in [400, 599].",
			KeyCreateStatus, sc.createStatus)
	}
	if sc.toolFail && sc.toolDelay == toolDisabled {
		sc.toolDelay = 0
	}
	return sc, nil
}
