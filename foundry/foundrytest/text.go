package foundrytest

import (
	"hash/fnv"
	"sort"
	"strings"
)

// words is the vocabulary of generated text. Tokens are picked by a hash of
// the request, so the same input and metadata always give the same text.
var words = [...]string{
	"the", "queue", "stream", "token", "worker", "cancel", "response", "agent",
	"foundry", "event", "relay", "subject", "server", "client", "model", "tool",
	"runs", "quickly", "safely", "again", "after", "before", "every", "output",
	"message", "delta", "resume", "window", "budget", "signal", "order", "state",
	"keeps", "sends", "reads", "stops", "waits", "starts", "ends", "holds",
	"small", "large", "early", "late", "clear", "exact", "fair", "calm",
	"north", "river", "stone", "light", "paper", "green", "amber", "silver",
	"one", "two", "three", "four", "five", "six", "seven", "eight",
}

// requestSeed hashes what determines the generated text: the model or agent,
// the instructions, the input and the metadata (sorted by key).
func requestSeed(req *createRequest) uint64 {
	h := fnv.New64a()
	h.Write([]byte(req.model))
	h.Write([]byte{0})
	h.Write(req.agentRaw)
	h.Write([]byte{0})
	if req.instructions != nil {
		h.Write([]byte(*req.instructions))
	}
	h.Write([]byte{0})
	h.Write(req.input)
	keys := make([]string, 0, len(req.metadata))
	for k := range req.metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Write([]byte{0})
		h.Write([]byte(k))
		h.Write([]byte{'='})
		h.Write([]byte(req.metadata[k]))
	}
	return h.Sum64()
}

// mix is splitmix64's finaliser: a cheap, well spread hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// word returns the i-th word for seed.
func word(seed uint64, i int) string {
	return words[mix(seed+uint64(i))%uint64(len(words))]
}

// appendToken appends the i-th text token for seed: the first is a
// capitalised word, the others a space and a word, so the concatenation
// reads as text.
func appendToken(dst []byte, seed uint64, i int) []byte {
	w := word(seed, i)
	if i == 0 {
		return append(append(dst, strings.ToUpper(w[:1])...), w[1:]...)
	}
	return append(append(dst, ' '), w...)
}

// tokenLen is len(appendToken(nil, seed, i)), without allocating.
func tokenLen(seed uint64, i int) int {
	if i == 0 {
		return len(word(seed, i))
	}
	return 1 + len(word(seed, i))
}

// estimateTokens is the emulator's input token count: about one token per
// four bytes, at least one.
func estimateTokens(parts ...[]byte) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n/4 + 1
}
