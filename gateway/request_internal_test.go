package gateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/foundryq/foundryq/events"
)

func TestDecodeCreate(t *testing.T) {
	t.Parallel()
	cr, err := decodeCreate([]byte(`{"model":"m","input":"x","callback_url":"https://h/cb"}`))
	if err != nil || !cr.generatedID || !strings.HasPrefix(cr.req.RunID, "run_") || cr.callbackURL != "https://h/cb" || cr.req.Model != "m" {
		t.Fatalf("%+v %v", cr, err)
	}
	cr, err = decodeCreate([]byte(` { "run_id" : "r1", "model":"m", "input":["x"] } `))
	if err == nil || cr.generatedID {
		// input items must be objects: the events rules apply unchanged
		t.Fatalf("array of strings as input: %+v %v", cr, err)
	}
	cr, err = decodeCreate([]byte(`{"run_id":"r1","model":"m","input":"x"}`))
	if err != nil || cr.generatedID || cr.req.RunID != "r1" || cr.callbackURL != "" {
		t.Fatalf("%+v %v", cr, err)
	}
	cr, err = decodeCreate([]byte(`{}`))
	var ve *events.ValidationError
	if !errors.As(err, &ve) || ve.Field == "run_id" {
		t.Fatalf("empty object: %v", err)
	}
	for _, c := range []struct{ body, field string }{
		{`{"model":"m","input":"x","callback_url":"a","callback_url":"b"}`, "callback_url"},
		{`{"model":"m","input":"x","Callback_URL":"a"}`, "Callback_URL"},
		{`{"model":"m","input":"x"`, "body"},
		{`"x"`, "body"},
		{``, "body"},
	} {
		_, err := decodeCreate([]byte(c.body))
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%s: %v, want a validation error on %s", c.body, err, c.field)
		}
	}
}

// FuzzDecodeCreate: whatever arrives, decodeCreate returns a validated
// request or a *events.ValidationError, never a panic; a request it
// accepts has a valid run id and re-encodes to a body events accepts.
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"x"}`, `{"run_id":"r","agent":{"name":"a"},"input":[{"role":"user","content":"x"}],"callback_url":"https://h"}`,
		`{"callback_url":1}`, `{"model":"m","input":"x"} x`, `{"a":{"b":[1,2,{"c":null}]}}`, `[`, `{"run_id":"\u0072"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		cr, err := decodeCreate(body)
		if err != nil {
			var ve *events.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %T %v is not a ValidationError", err, err)
			}
			return
		}
		if !events.ValidRunID(cr.req.RunID) {
			t.Fatalf("accepted run id %q", cr.req.RunID)
		}
		if err := cr.req.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
	})
}
