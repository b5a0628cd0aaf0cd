package main

import (
	"encoding/json"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// terminalWriter marks a stderr that is a terminal (run sets it): console
// logs are coloured there only, never in a file or a pipe.
type terminalWriter struct{ io.Writer }

// markTerminal returns w (what writes to orig) marked as a terminal when
// orig is one and colour is not turned off (NO_COLOR, TERM=dumb).
func markTerminal(orig, w io.Writer) io.Writer {
	f, ok := orig.(*os.File)
	if !ok || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return w
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return w
	}
	return terminalWriter{w}
}

// consoleDurationFields are the log fields holding a duration (zerolog's
// Dur: a number of milliseconds); console logs show them with their unit
// (took=1.5s). A test checks that every Dur field of the code is here.
var consoleDurationFields = map[string]bool{
	"ack_wait": true, "bound": true, "retry_in": true, "since_submit": true, "timeout": true, "took": true,
}

// ambiguousDurationFields are Dur fields whose name the code also uses
// for a number that is not a duration ("after": a sequence number when a
// worker re-attaches to a stream); they stay numbers (milliseconds).
var ambiguousDurationFields = map[string]bool{"after": true}

// consoleWriter is the console format of the logs on w: colour on a
// terminal only, durations with units.
func consoleWriter(w io.Writer) zerolog.ConsoleWriter {
	_, tty := w.(terminalWriter)
	return zerolog.ConsoleWriter{
		Out: w, TimeFormat: "15:04:05.000",
		NoColor:       !tty || os.Getenv("NO_COLOR") != "",
		FormatPrepare: durationsWithUnits,
	}
}

// durationsWithUnits rewrites the duration fields of a decoded log entry
// as durations (1.5s, 250ms).
func durationsWithUnits(evt map[string]any) error {
	for k, v := range evt {
		n, ok := v.(json.Number)
		if !ok || !consoleDurationFields[k] {
			continue
		}
		f, err := n.Float64()
		if err != nil {
			continue
		}
		d := time.Duration(f * float64(zerolog.DurationFieldUnit))
		switch {
		case d >= time.Second:
			d = d.Round(time.Millisecond)
		case d >= time.Millisecond:
			d = d.Round(time.Microsecond)
		}
		evt[k] = d.String()
	}
	return nil
}
