package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
)

// laneFlags are the worker's scheduling settings (docs/scheduling.md).
type laneFlags struct {
	fifo        *bool
	priorityAge *time.Duration
	weights     *string
}

func addLaneFlags(f *flags) laneFlags {
	var l laneFlags
	l.fifo = f.Bool("fifo", "FOUNDRYQ_FIFO", false, "take runs first in, first out from the runs stream, as before lanes: no priorities, no fair share between fairness keys (every worker of a fleet should agree)")
	l.priorityAge = f.Duration("priority-age", "FOUNDRYQ_PRIORITY_AGE", consumer.DefaultPriorityAge, "starvation bound: a waiting run's priority rises one level (low to normal, normal to high) for every this long it has waited (negative: never)", positiveOrOff(0))
	l.weights = f.String("weights", "FOUNDRYQ_WEIGHTS", "", "fairness keys' shares of the runs started among waiting runs of one priority: KEY=N entries separated by commas (N 1..1000; a key not named has 1), e.g. tenant-a=3,tenant-b=1", rule[string]{func(v string) bool {
		_, err := parseWeights(v)
		return err == nil
	}, "KEY=N entries separated by commas (KEY: [A-Za-z0-9_-]{1,64}; N: 1..1000)"})
	return l
}

// parseWeights parses --weights; nil for "".
func parseWeights(v string) (map[string]int, error) {
	var m map[string]int
	for _, entry := range strings.Split(v, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		key, n, ok := strings.Cut(entry, "=")
		wt, err := strconv.Atoi(n)
		if !ok || !events.ValidFairnessKey(key) || err != nil || wt < 1 || wt > 1000 {
			return nil, fmt.Errorf("weights: %q is not KEY=N (N 1..1000)", entry)
		}
		if m == nil {
			m = make(map[string]int)
		}
		m[key] = wt
	}
	return m, nil
}
