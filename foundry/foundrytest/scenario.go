package foundrytest

import (
	"strconv"
	"time"
)

// Metadata keys that script a response. They are documented in the package
// doc; the values are decimal strings as metadata values are strings.
const (
	KeyTokens                = "emu_tokens"
	KeyTokenMS               = "emu_token_ms"
	KeyToolMS                = "emu_tool_ms"
	KeyCreatedMS             = "emu_created_ms"
	KeyFailAfter             = "emu_fail_after"
	KeyDropAfter             = "emu_drop_after"
	KeyCreateStatus          = "emu_create_status"
	KeyToolFail              = "emu_tool_fail"
	KeyCompleteDespiteCancel = "emu_complete_despite_cancel"
	defaultToolName          = "emulator_tool"
	defaultServerLabel       = "emulator"
	toolDisabled             = time.Duration(-1)
	noLimit                  = -1
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
