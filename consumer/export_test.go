package consumer

import "time"

// HoldStopWatch makes the stop watch of cfg's worker's runs wait, up to
// 10s, until the run's reader has ended before it looks: the order a loaded
// machine may give when the stop itself ends a wait of the reader.
func HoldStopWatch(cfg *Config) {
	cfg.stopWatchHook = func(readerDone <-chan outcome) {
		for end := time.Now().Add(10 * time.Second); len(readerDone) == 0 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
	}
}
