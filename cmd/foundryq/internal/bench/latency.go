package bench

import (
	"slices"
	"time"

	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// Percentiles summarise a latency sample, in milliseconds.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Percentiles{N: len(ds), P50: ms(at(0.50)), P99: ms(at(0.99)), Max: ms(ds[len(ds)-1])}
}

// tokenLatencies appends, for each token of rec that the receipts cover,
// the time from its generation to the arrival of the first delivery whose
// text reaches its end.
func tokenLatencies(dst []time.Duration, rec foundrytest.ResponseRecord, rs []receipt) []time.Duration {
	j := 0
	for i, end := range rec.TokenEnds {
		if i >= len(rec.TokenTimes) {
			break
		}
		for j < len(rs) && rs[j].Cum < end {
			j++
		}
		if j == len(rs) {
			break
		}
		dst = append(dst, time.Duration(rs[j].At-rec.TokenTimes[i]))
	}
	return dst
}
