package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/foundryq/foundryq/events"
)

// CallbackURLField is the member of a POST /v1/runs body that asks for a
// completion callback. It belongs to the gateway, not to events.RunRequest
// (which refuses unknown fields): the gateway takes it out before the
// request is decoded and published.
const CallbackURLField = "callback_url"

// createRequest is a decoded POST /v1/runs body.
type createRequest struct {
	req         events.RunRequest
	callbackURL string
	generatedID bool // run_id was absent and the gateway made one
}

// decodeCreate decodes a POST /v1/runs body: a RunRequest with run_id
// optional (made with events.NewRunID when absent) and callback_url
// optional. Every other member goes to events.DecodeRunRequest as it came,
// so that its rules (unknown fields, keys given twice, ...) apply
// unchanged. Errors are *events.ValidationError.
func decodeCreate(body []byte) (createRequest, error) {
	rest, cb, hasRunID, err := splitCallback(body)
	if err != nil {
		if _, derr := events.DecodeRunRequest(body); derr != nil {
			return createRequest{}, derr // its words for malformed JSON
		}
		return createRequest{}, err
	}
	var out createRequest
	out.callbackURL = cb
	if !hasRunID {
		out.generatedID = true
		rest = appendMember(rest, "run_id", events.NewRunID())
	}
	req, err := events.DecodeRunRequest(rest)
	if err != nil {
		return createRequest{}, err
	}
	out.req = req
	return out, nil
}

// splitCallback rewrites a JSON object without its callback_url member and
// returns that member's value; every other member is copied as it came
// (duplicates included). It reports whether run_id was present.
func splitCallback(body []byte) (rest []byte, callbackURL string, hasRunID bool, err error) {
	malformed := &events.ValidationError{Field: "body", Reason: "want a JSON object", Err: events.ErrMalformed}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, "", false, malformed
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	seenCallback := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "", false, malformed
		}
		key, ok := tok.(string)
		if !ok {
			return nil, "", false, malformed
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, "", false, malformed
		}
		switch key {
		case CallbackURLField:
			if seenCallback {
				return nil, "", false, &events.ValidationError{Field: CallbackURLField, Reason: "given twice", Err: events.ErrMalformed}
			}
			seenCallback = true
			if err := json.Unmarshal(raw, &callbackURL); err != nil {
				return nil, "", false, &events.ValidationError{Field: CallbackURLField, Reason: "want a string (an http or https URL)", Err: events.ErrMalformed}
			}
			continue
		case "run_id":
			hasRunID = true
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(raw)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, "", false, malformed
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, "", false, &events.ValidationError{Field: "body", Reason: "data after the JSON object", Err: events.ErrMalformed}
	}
	buf.WriteByte('}')
	return buf.Bytes(), callbackURL, hasRunID, nil
}

// appendMember adds "key": value (a string) to a JSON object.
func appendMember(obj []byte, key, value string) []byte {
	k, _ := json.Marshal(key)
	v, _ := json.Marshal(value)
	out := append([]byte(nil), obj[:len(obj)-1]...) // without the closing brace
	if len(bytes.TrimSpace(out)) > 1 {
		out = append(out, ',')
	}
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, v...)
	return append(out, '}')
}
