package foundry

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodeDelta is the hot path of a stream: it decodes a
// response.output_text.delta event (almost every event of a text stream)
// without reflection. It handles only the plain shape and reports false for
// anything else (another type, a duplicate or escaped key, a top-level error,
// malformed JSON), which the general decoder then takes. When it reports
// true, ev holds what the general decoder would have produced.
// BenchmarkDecodeDelta compares the two.
func decodeDelta(data []byte, ev *Event) bool {
	// Every delta of a message carries the same item_id: the previous
	// event's is reused when the bytes match, rather than allocated again.
	p := deltaParser{b: data, reuse: ev.ItemID}
	*ev = Event{Raw: data}
	var seenType, seenDelta, seenSeq, seenItem, seenIndex bool
	p.ws()
	if !p.eat('{') {
		return false
	}
	p.ws()
	if p.eat('}') {
		return false
	}
	for {
		p.ws()
		key, ok := p.plainBytes()
		if !ok {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return false
		}
		p.ws()
		switch string(key) { // no allocation: the compiler compares the bytes
		case "type":
			v, ok := p.plainBytes()
			if !ok || seenType || string(v) != EventOutputTextDelta {
				return false
			}
			seenType, ev.Type = true, EventOutputTextDelta
		case "delta":
			v, ok := p.string()
			if !ok || seenDelta {
				return false
			}
			seenDelta, ev.Delta = true, v
		case "sequence_number":
			n, ok := p.int()
			if !ok || seenSeq {
				return false
			}
			seenSeq, ev.SequenceNumber, ev.HasSeq = true, n, true
		case "item_id":
			v, ok := p.stringReusing(p.reuse)
			if !ok || seenItem {
				return false
			}
			seenItem, ev.ItemID = true, v
		case "output_index":
			n, ok := p.int()
			if !ok || seenIndex {
				return false
			}
			seenIndex, ev.OutputIndex = true, int(n)
		case "error", "response", "item", "text", "code", "message", "param":
			return false // fields the general decoder interprets
		default:
			if !p.skip(0) {
				return false
			}
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if !p.eat('}') {
			return false
		}
		p.ws()
		return p.i == len(p.b) && seenType && seenDelta
	}
}

// deltaParser scans one JSON value from b.
type deltaParser struct {
	b     []byte
	i     int
	reuse string // see stringReusing
}

func (p *deltaParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *deltaParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// plainBytes reads a string without escapes or control characters and
// returns its bytes (not copied).
func (p *deltaParser) plainBytes() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// string reads any JSON string; escapes are decoded by encoding/json.
func (p *deltaParser) string() (string, bool) { return p.stringReusing("") }

// stringReusing reads a JSON string; when it equals reuse (and has no
// escapes) it returns reuse itself, without allocating.
func (p *deltaParser) stringReusing(reuse string) (string, bool) {
	raw, escaped, ok := p.rawString()
	if !ok {
		return "", false
	}
	if !escaped {
		body := raw[1 : len(raw)-1]
		if reuse != "" && string(body) == reuse { // no allocation: a comparison
			return reuse, true
		}
		return string(body), validUTF8(raw)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// rawString scans a JSON string and returns it with its quotes, and
// whether it holds an escape.
func (p *deltaParser) rawString() (raw []byte, escaped, ok bool) {
	start := p.i
	if !p.eat('"') {
		return nil, false, false
	}
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '\\':
			escaped = true
			p.i += 2
			continue
		case c == '"':
			p.i++
			return p.b[start:p.i], escaped, true
		case c < 0x20:
			return nil, false, false
		}
		p.i++
	}
	return nil, false, false
}

// skipString passes over a JSON string without keeping it: what string
// accepts, without allocating.
func (p *deltaParser) skipString() bool {
	raw, escaped, ok := p.rawString()
	if !ok {
		return false
	}
	if !escaped {
		return validUTF8(raw)
	}
	return json.Valid(raw)
}

// validUTF8 is false for invalid UTF-8, which encoding/json would replace:
// such input goes to the general decoder.
func validUTF8(b []byte) bool { return utf8.Valid(b) }

// int reads a JSON integer that fits an int64 (no fraction or exponent).
func (p *deltaParser) int() (int64, bool) {
	start := p.i
	p.eat('-')
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	digits := p.b[start:p.i]
	if len(digits) == 0 || (len(digits) > 1 && digits[0] == '0') || (len(digits) > 2 && digits[0] == '-' && digits[1] == '0') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(digits), 10, 64)
	return n, err == nil
}

// skip passes over one value of any kind, nested at most 32 deep.
func (p *deltaParser) skip(depth int) bool {
	if depth > 32 || p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return p.skipString()
	case c == '{' || c == '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		p.i++
		p.ws()
		if p.eat(closing) {
			return true
		}
		for {
			p.ws()
			if c == '{' {
				if !p.skipString() {
					return false
				}
				p.ws()
				if !p.eat(':') {
					return false
				}
				p.ws()
			}
			if !p.skip(depth + 1) {
				return false
			}
			p.ws()
			if p.eat(',') {
				continue
			}
			return p.eat(closing)
		}
	default:
		// A number or a literal: take its characters, then let encoding/json
		// judge it.
		start := p.i
		for p.i < len(p.b) && p.b[p.i] != ',' && p.b[p.i] != '}' && p.b[p.i] != ']' && p.b[p.i] != ' ' && p.b[p.i] != '\n' && p.b[p.i] != '\t' && p.b[p.i] != '\r' {
			p.i++
		}
		return p.i > start && json.Valid(p.b[start:p.i])
	}
}
