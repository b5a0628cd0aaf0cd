package foundrytest

import (
	"testing"
	"time"
)

func TestParseScenario(t *testing.T) {
	t.Parallel()
	cfg := Config{DefaultTokens: 7, DefaultTokenDelay: time.Millisecond, MaxTokens: 100}.withDefaults()
	def, aerr := parseScenario(map[string]string{"run_id": "x"}, cfg)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if def != (scenario{tokens: 7, tokenDelay: time.Millisecond, toolDelay: toolDisabled, failAfter: noLimit, dropAfter: noLimit,
		errorAfter: noLimit, createStatusTimes: noLimit, keepalive: 30 * time.Second, failCode: failedCode,
		silentAfter: noLimit, silentFor: silentForever, functionCalls: 1}) {
		t.Fatalf("defaults: %+v", def)
	}
	full, aerr := parseScenario(map[string]string{
		KeyTokens: "9", KeyTokenMS: "3", KeyToolMS: "40", KeyCreatedMS: "50", KeyFailAfter: "6",
		KeyDropAfter: "5", KeyCreateStatus: "429", KeyCreateStatusTimes: "2", KeyToolFail: "1", KeyCompleteDespiteCancel: "1",
		KeyKeepaliveMS: "7", KeyGet404MS: "30000", KeyErrorAfter: "4", KeyErrorFail: "1", KeyFailCode: "rate_limit_exceeded", KeyHostedAgent: "1",
		KeyQueuedMS: "3600000", KeySilentAfter: "3", KeySilentMS: "20", KeyCancelFailMS: "60", KeyCancelHangMS: "70", KeyFunctionCalls: "3",
	}, cfg)
	if aerr != nil {
		t.Fatal(aerr)
	}
	want := scenario{tokens: 9, tokenDelay: 3 * time.Millisecond, toolDelay: 40 * time.Millisecond, createdDelay: 50 * time.Millisecond,
		failAfter: 4, dropAfter: 5, createStatus: 429, createStatusTimes: 2, toolFail: true, completeDespiteCancel: true,
		keepalive: 7 * time.Millisecond, get404: 30 * time.Second, errorAfter: 4, failCode: "rate_limit_exceeded", hosted: true,
		queuedDelay: time.Hour, silentAfter: 3, silentFor: 20 * time.Millisecond, cancelFail: 60 * time.Millisecond,
		cancelHang: 70 * time.Millisecond, functionCalls: 3}
	if full != want {
		t.Fatalf("got %+v\nwant %+v", full, want)
	}
	if sc, _ := parseScenario(map[string]string{KeyToolFail: "1"}, cfg); sc.toolDelay != 0 {
		t.Fatalf("emu_tool_fail alone should imply a tool call: %+v", sc)
	}
	for _, bad := range []map[string]string{
		{KeyTokens: "101"}, {KeyTokens: "-1"}, {KeyTokens: "1.5"}, {KeyTokenMS: "x"}, {KeyToolMS: "3600001"},
		{KeyCreateStatus: "200"}, {KeyCreateStatus: "600"}, {KeyToolFail: "2"}, {KeyCompleteDespiteCancel: "yes"},
		{KeyFailAfter: ""}, {KeyDropAfter: "99999999999"}, {KeyKeepaliveMS: "0"}, {KeyGet404MS: "-1"},
		{KeyErrorFail: "1"}, {KeyCreateStatusTimes: "1"}, {KeyFailCode: "oops"}, {KeyHostedAgent: "true"},
		{KeyQueuedMS: "3600001"}, {KeyQueuedMS: "-5"}, {KeySilentAfter: "101"}, {KeySilentAfter: "x"},
		{KeySilentMS: "10"}, {KeySilentAfter: "1", KeySilentMS: "3600001"}, {KeyCancelFailMS: "3600001"},
		{KeyCancelFailMS: "1s"}, {KeyCancelHangMS: "-1"}, {KeyCancelHangMS: "3600001"},
	} {
		if _, aerr := parseScenario(bad, cfg); aerr == nil || aerr.status != 400 {
			t.Errorf("%v accepted", bad)
		}
	}
}
