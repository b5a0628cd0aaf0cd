// Package owned lists the fields of a Responses create request that
// foundryq sets itself, once for the run-request validation (events) and
// the request builder (foundry).
package owned

// RequestFields are the body fields of a create request that foundryq owns:
// a run request's options may not set them. "agent" and "agent_reference"
// are both listed because the field that carries an agent reference is
// configurable; "stream_options" because the worker decides how the stream
// is shaped.
var RequestFields = []string{
	"agent", "agent_reference", "background", "input", "instructions", "max_output_tokens",
	"metadata", "model", "store", "stream", "stream_options", "tools",
}

// Is reports whether key is one of RequestFields.
func Is(key string) bool {
	for _, f := range RequestFields {
		if f == key {
			return true
		}
	}
	return false
}
