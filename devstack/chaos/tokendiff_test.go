package chaos

import "strings"

// diffTokens compares the relayed text with the generated text, token by
// token (the emulator's tokens are words separated by spaces). For a
// complete run the two must be equal: lost counts generated tokens missing
// from the relay, dup relayed tokens that were not generated (repeats).
// For a run that stopped early the relay must be a prefix of the
// generated text: only tokens missing before the last one relayed count
// as lost.
func diffTokens(relayed, generated string, complete bool) (lost, dup int) {
	got, want := strings.Fields(relayed), strings.Fields(generated)
	if !complete && len(got) <= len(want) && equal(got, want[:len(got)]) {
		return 0, 0
	}
	if complete && equal(got, want) {
		return 0, 0
	}
	common, lastMatch := lcs(got, want)
	dup = len(got) - common
	if complete {
		lost = len(want) - common
	} else {
		lost = lastMatch + 1 - common
	}
	return lost, dup
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// lcs returns the length of the longest common subsequence of a and b and
// the index in b of the last element of one such subsequence (-1 if
// empty).
func lcs(a, b []string) (int, int) {
	// dp[i][j]: LCS of a[i:] and b[j:].
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	last := -1
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			last = j
			i++
			j++
		case dp[i+1][j] >= dp[i][j+1]:
			i++
		default:
			j++
		}
	}
	return dp[0][0], last
}
