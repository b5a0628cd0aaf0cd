package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/foundryq/foundryq/events"
)

// Rules for settings (flags.String, Int, Duration): each says in words what
// it accepts, for the error that names the setting.

func atLeast(n int) rule[int] {
	return rule[int]{func(v int) bool { return v >= n }, fmt.Sprintf("an integer of at least %d", n)}
}

// unlimitedOrAtLeast accepts -1 (no limit) or n and more.
func unlimitedOrAtLeast(n int) rule[int] {
	return rule[int]{func(v int) bool { return v == -1 || v >= n }, fmt.Sprintf("-1 (no limit) or an integer of at least %d", n)}
}

func between(lo, hi int) rule[int] {
	return rule[int]{func(v int) bool { return v >= lo && v <= hi }, fmt.Sprintf("an integer from %d to %d", lo, hi)}
}

// notNegative accepts 0 (what 0 means is in the setting's help).
func notNegative(zero string) rule[time.Duration] {
	return rule[time.Duration]{func(d time.Duration) bool { return d >= 0 }, "a duration of 0 (" + zero + ") or more, e.g. 30s"}
}

func positive() rule[time.Duration] {
	return rule[time.Duration]{func(d time.Duration) bool { return d > 0 }, "a positive duration, e.g. 30s"}
}

// positiveOrOff accepts a positive duration up to most (0: no bound) or a
// negative one, which turns the feature off.
func positiveOrOff(most time.Duration) rule[time.Duration] {
	want := "a positive duration, or a negative one for off"
	if most > 0 {
		want = fmt.Sprintf("a positive duration up to %s, or a negative one for off", most)
	}
	return rule[time.Duration]{func(d time.Duration) bool { return d < 0 || d > 0 && (most == 0 || d <= most) }, want}
}

func durAtLeast(least time.Duration) rule[time.Duration] {
	return rule[time.Duration]{func(d time.Duration) bool { return d >= least }, "a duration of at least " + least.String()}
}

func oneOf(vals ...string) rule[string] {
	return rule[string]{func(v string) bool {
		for _, ok := range vals {
			if strings.EqualFold(v, ok) {
				return true
			}
		}
		return false
	}, "one of " + strings.Join(vals, ", ")}
}

func notEmpty(want string) rule[string] {
	return rule[string]{func(v string) bool { return strings.TrimSpace(v) != "" }, want}
}

// hostPortOrEmpty accepts HOST:PORT, :PORT, or "" (off).
func hostPortOrEmpty() rule[string] {
	return rule[string]{func(v string) bool {
		if v == "" {
			return true
		}
		_, port, err := net.SplitHostPort(v)
		return err == nil && port != ""
	}, `HOST:PORT or :PORT, or "" for off`}
}

// idOrEmpty accepts "" (the default) or an id as run ids are.
func idOrEmpty() rule[string] {
	return rule[string]{func(v string) bool { return v == "" || events.ValidRunID(v) }, `"" (the default) or [A-Za-z0-9_-]{1,64}`}
}

func validPrefix() rule[string] {
	return rule[string]{func(v string) bool { _, err := events.NewNames(v); return err == nil }, "NATS subject tokens of [A-Za-z0-9_-] separated by dots, e.g. foundryq or acme.fq"}
}

// fileOrEmpty accepts "" or the path of a readable file.
func fileOrEmpty() rule[string] {
	return rule[string]{func(v string) bool {
		if v == "" {
			return true
		}
		fh, err := os.Open(v)
		if err != nil {
			return false
		}
		fh.Close()
		return true
	}, `"" or the path of a readable file`}
}

// dirOrEmpty accepts "" or a directory.
func dirOrEmpty() rule[string] {
	return rule[string]{func(v string) bool {
		if v == "" {
			return true
		}
		st, err := os.Stat(v)
		return err == nil && st.IsDir()
	}, `"" or an existing directory`}
}

// validScope accepts "" or an absolute URL (an Entra ID scope).
func validScope(v string) bool {
	if v == "" {
		return true
	}
	u, err := url.Parse(v)
	return err == nil && u.Scheme != "" && u.Host != ""
}
