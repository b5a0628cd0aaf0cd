package foundrytest

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
)

// appendFrame appends one SSE frame: "event: <typ>\ndata: <data>\n\n".
// data is one line of JSON (encoding/json never emits raw newlines).
func appendFrame(dst []byte, typ string, data []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}

// deltaFrameOverhead is the fixed part of a delta frame, for sizing.
const deltaFrameOverhead = "event: " + evTextDelta + "\ndata: {\"type\":\"" + evTextDelta +
	"\",\"sequence_number\":,\"item_id\":\"\",\"output_index\":,\"content_index\":0,\"delta\":\"\",\"logprobs\":[],\"obfuscation\":\"0123456789012345678\"}\n\n"

// appendDeltaFrame appends a response.output_text.delta frame whose delta is
// the i-th token of seed, without reflection or allocation: this is the hot
// path of the emulator.
//
// With obfuscate the event carries an "obfuscation" field of random
// characters, as the service adds unless stream_options.include_obfuscation
// is false (openai-go v3.98.0 ResponseTextDeltaEvent.Obfuscation): 4 to 19
// letters here, chosen from seed and i.
func appendDeltaFrame(dst []byte, seq int, itemID string, outputIndex int, seed uint64, i int, obfuscate bool) []byte {
	dst = append(dst, "event: "+evTextDelta+"\ndata: {\"type\":\""+evTextDelta+"\",\"sequence_number\":"...)
	dst = strconv.AppendInt(dst, int64(seq), 10)
	dst = append(dst, `,"item_id":"`...)
	dst = append(dst, itemID...)
	dst = append(dst, `","output_index":`...)
	dst = strconv.AppendInt(dst, int64(outputIndex), 10)
	dst = append(dst, `,"content_index":0,"delta":"`...)
	dst = appendToken(dst, seed, i) // vocabulary words need no JSON escaping
	dst = append(dst, "\",\"logprobs\":[]"...)
	if obfuscate {
		dst = appendObfuscation(dst, seed, i)
	}
	return append(dst, "}\n\n"...)
}

// obfuscationAlphabet holds the characters of an obfuscation field.
const obfuscationAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// appendObfuscation appends `,"obfuscation":"<4 to 19 characters>"`.
func appendObfuscation(dst []byte, seed uint64, i int) []byte {
	x := seed ^ (uint64(i)+1)*0x9E3779B97F4A7C15
	dst = append(dst, `,"obfuscation":"`...)
	for n := 4 + int(x%16); n > 0; n-- {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		dst = append(dst, obfuscationAlphabet[x%uint64(len(obfuscationAlphabet))])
	}
	return append(dst, '"')
}

// setSSEHeaders prepares w for an event stream.
func setSSEHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
}

// followEnd says how a stream ended.
type followEnd int

const (
	endComplete followEnd = iota // every frame of the complete log was written
	endGone                      // the client went away or a write failed
	endCut                       // the frame limit (emu_drop_after) was reached
)

// follow writes the frames of r from sequence number from on: first what
// the log holds, then live frames as they are appended, until the log is
// complete, ctx ends, a write fails, or limit frames of the log have been
// written (limit < 0: no limit). Frames are written in batches and flushed
// when the follower has caught up, so a fast generation costs few syscalls.
func (r *response) follow(ctx context.Context, w http.ResponseWriter, from, limit int) followEnd {
	rc := http.NewResponseController(w)
	i := from
	wrote, yielded := false, false
	for {
		r.mu.Lock()
		total := len(r.ends)
		n := total
		if limit >= 0 && n > limit {
			n = limit
		}
		var chunk []byte
		if i < n {
			start := 0
			if i > 0 {
				start = r.ends[i-1]
			}
			chunk = r.buf[start:r.ends[n-1]]
		}
		complete := r.closed && i >= total
		cut := limit >= 0 && i >= limit && !complete
		var wake chan struct{}
		if chunk == nil && !complete && !cut {
			if r.wake == nil {
				r.wake = make(chan struct{})
			}
			wake = r.wake
		}
		r.mu.Unlock()

		switch {
		case chunk != nil:
			if _, err := w.Write(chunk); err != nil {
				return endGone
			}
			wrote, yielded = true, false
			i = n
			continue
		case complete:
			if rc.Flush() != nil {
				return endGone
			}
			return endComplete
		case cut:
			if rc.Flush() != nil {
				return endGone
			}
			return endCut
		}
		if !yielded {
			// Caught up with a live generation: let it run before paying
			// for a flush, so that a fast generation is sent in batches.
			yielded = true
			runtime.Gosched()
			continue
		}
		yielded = false
		if wrote && rc.Flush() != nil {
			return endGone
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return endGone
		}
	}
}

// writeErrorEvent ends a stream with an "error" event numbered seq (the
// number of the log's next event; it is not in the log) and reports how the
// write went.
func writeErrorEvent(w http.ResponseWriter, seq int) followEnd {
	code := failedCode
	data, _ := json.Marshal(errorEvent{Type: evError, SequenceNumber: seq, Code: &code, Message: failedMessage})
	if _, err := w.Write(appendFrame(nil, evError, data)); err != nil {
		return endGone
	}
	if http.NewResponseController(w).Flush() != nil {
		return endGone
	}
	return endComplete
}

// cutConnection ends the HTTP exchange abruptly, as a network failure would:
// the connection is closed without the end of the chunked body, so the
// client sees an unexpected EOF. Where the connection cannot be taken over
// (HTTP/2, recorders) the stream just ends.
func cutConnection(w http.ResponseWriter) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	_ = buf.Flush()
	_ = conn.Close()
}
