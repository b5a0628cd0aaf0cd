package chaos

import "testing"

func TestDiffTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		relayed, generated string
		complete           bool
		wantLost, wantDup  int
	}{
		{"equal", "A b c", "A b c", true, 0, 0},
		{"prefix of a cancelled run", "A b", "A b c d", false, 0, 0},
		{"empty relay of a cancelled run", "", "A b c", false, 0, 0},
		{"lost at the end of a completed run", "A b", "A b c d", true, 2, 0},
		{"lost in the middle", "A c d", "A b c d", false, 1, 0},
		{"repeated", "A b b c", "A b c", true, 0, 1},
		{"repeated in a cancelled run", "A b A b", "A b c d", false, 0, 2},
		{"longer than generated", "A b c d", "A b", false, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lost, dup := diffTokens(tc.relayed, tc.generated, tc.complete)
			if lost != tc.wantLost || dup != tc.wantDup {
				t.Fatalf("lost %d dup %d, want %d %d", lost, dup, tc.wantLost, tc.wantDup)
			}
		})
	}
}
