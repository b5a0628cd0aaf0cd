package main

import (
	"maps"
	"testing"
)

func TestParseWeights(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]int
		ok   bool
	}{
		{"", nil, true},
		{"a=3", map[string]int{"a": 3}, true},
		{" tenant-a=3 , tenant_b=1000 ", map[string]int{"tenant-a": 3, "tenant_b": 1000}, true},
		{"a", nil, false},
		{"a=0", nil, false},
		{"a=1001", nil, false},
		{"a.b=2", nil, false},
		{"a=x", nil, false},
	} {
		got, err := parseWeights(c.in)
		if (err == nil) != c.ok || !maps.Equal(got, c.want) {
			t.Errorf("parseWeights(%q) = %v, %v; want %v, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
