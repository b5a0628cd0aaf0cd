package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Digest identifies a request's content: the hex SHA-256 of its canonical
// JSON encoding (raw fields compacted, object keys in the order
// encoding/json writes them). Two requests with the same fields have the
// same digest however their JSON was spaced. The state record keeps it, so
// that a request resubmitted under a used run id is told apart from a
// retry of the same request. The fairness key and the priority are left
// out: they say how the run is scheduled, not what it runs, and may travel
// in headers instead.
func (r RunRequest) Digest() string {
	c := r
	c.FairnessKey, c.Priority = "", "" // how the run is scheduled, not what it runs
	c.Tools = append([]json.RawMessage(nil), r.Tools...)
	if r.Options != nil {
		c.Options = make(map[string]json.RawMessage, len(r.Options))
		for k, v := range r.Options {
			c.Options[k] = v
		}
	}
	c.compact()
	data, err := json.Marshal(c)
	if err != nil {
		// Only invalid raw JSON fails to encode; such a request never
		// validates, so its digest only has to be stable.
		data = []byte(r.RunID)
	}
	return digestBytes(data)
}

func digestBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
