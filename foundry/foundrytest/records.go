package foundrytest

import (
	"net/http"
	"sort"
	"strings"
)

// RecordsByPrefix returns the records of every response created for a
// metadata.run_id that starts with prefix ("" for all), ordered by run id,
// then oldest first. With Config.RecordTimes they carry token and tool call
// times: this is what a benchmark reads to learn what was generated when.
func (h *Handler) RecordsByPrefix(prefix string) []ResponseRecord {
	h.mu.Lock()
	ids := make([]string, 0, len(h.runs))
	for id := range h.runs {
		if strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var rs []*response
	for _, id := range ids {
		rs = append(rs, h.runs[id].response...)
	}
	h.mu.Unlock()
	out := make([]ResponseRecord, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.record())
	}
	return out
}

// handleRecords serves RecordsByPrefix(run_prefix) as a JSON array: GET
// /_emulator/records?run_prefix=P. Like /_emulator/stats it needs no key.
func (h *Handler) handleRecords(w http.ResponseWriter, req *http.Request) {
	writeJSON(w, http.StatusOK, h.RecordsByPrefix(req.URL.Query().Get("run_prefix")))
}
