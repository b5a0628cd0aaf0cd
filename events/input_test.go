package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events"
)

func TestDecodeInputAnswer(t *testing.T) {
	t.Parallel()
	big := `"` + strings.Repeat("x", events.MaxInputOutputLen+1) + `"`
	for body, ok := range map[string]bool{
		`{"id":"mcpr_1","approve":true}`:                     true,
		`{"id":"mcpr_1","approve":false,"reason":"not now"}`: true,
		`{"id":"call_1","output":"{\"temp\":21}"}`:           true,
		`{"id":"call_1","output":""}`:                        true,
		`{"id":"call_1"}`:                                    false, // neither
		`{"id":"call_1","approve":true,"output":"x"}`:        false, // both
		`{"id":"call_1","output":"x","reason":"r"}`:          false, // reason goes with approve
		`{"id":"_request","approve":true}`:                   false, // not an item id
		`{"id":"a.b","approve":true}`:                        false, // a subject token
		`{"id":"","approve":true}`:                           false,
		`{"id":"mcpr_1","approve":"yes"}`:                    false,
		`{"id":"mcpr_1","approve":true,"extra":1}`:           false,
		`{"id":"mcpr_1","approve":true} {}`:                  false,
		`[]`:                                                 false,
		`{"id":"call_1","output":` + big + `}`:               false,
		`{"id":"mcpr_1","approve":true,"reason":"` + strings.Repeat("r", events.MaxInputReasonLen+1) + `"}`: false,
	} {
		_, err := events.DecodeInputAnswer([]byte(body))
		if (err == nil) != ok || (err != nil && !errors.Is(err, events.ErrBadAnswer)) {
			t.Errorf("%.80s: %v", body, err)
		}
	}
}
