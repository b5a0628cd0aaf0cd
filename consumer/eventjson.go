package consumer

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/foundryq/foundryq/events"
)

// appendTextDeltaJSON appends the JSON of a text.delta event that carries
// nothing but its text, byte for byte what encoding/json makes of it,
// without reflection: this runs for every event of a streaming run. It
// reports false (and appends nothing) for any other event, or a time
// encoding/json would refuse, which json.Marshal then encodes.
func appendTextDeltaJSON(dst []byte, ev *events.RunEvent) ([]byte, bool) {
	if ev.Type != events.TypeTextDelta || ev.ResponseID != "" || ev.Attempt != 0 || ev.Worker != "" ||
		ev.Background != nil || ev.Tool != nil || ev.Error != nil || ev.Status != "" || ev.IncompleteReason != "" ||
		ev.Usage != nil || ev.Reason != "" || ev.UpstreamStatus != "" || ev.UsageUnknown {
		return dst, false
	}
	if y := ev.Time.Year(); y < 0 || y > 9999 {
		return dst, false
	}
	dst = append(dst, `{"run_id":`...)
	dst = appendJSONString(dst, ev.RunID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, ev.Seq, 10)
	dst = append(dst, `,"type":"text.delta","time":"`...)
	dst = ev.Time.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	if ev.Text != "" {
		dst = append(dst, `,"text":`...)
		dst = appendJSONString(dst, ev.Text)
	}
	return append(dst, '}'), true
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string as encoding/json writes it:
// HTML-safe (<, > and & escaped), invalid UTF-8 replaced by U+FFFD, U+2028
// and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
