package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/foundryq/foundryq/internal/secrets"
)

// flags is a flag set whose settings can also come from the environment.
// Precedence: command line, then environment variable, then default.
type flags struct {
	fs      *flag.FlagSet
	usage   string
	entries []flagEntry
	envErrs []error
	checks  []check
	args    []string // positional arguments, after parse
}

type flagEntry struct {
	name, env, def, help string
	secret               bool
	fromEnv              bool // the environment variable is set
}

// check is one rule a setting's value must pass after parsing.
type check struct {
	name string        // the setting
	ok   func() bool   // whether its value passes
	want func() string // what is accepted, for the error
}

func newFlags(name, usage string) *flags {
	f := &flags{fs: flag.NewFlagSet(name, flag.ContinueOnError), usage: usage}
	f.fs.SetOutput(io.Discard)
	return f
}

func (f *flags) add(name, env, def, help string) string {
	f.entries = append(f.entries, flagEntry{name: name, env: env, def: def, help: help})
	if env != "" {
		if v, ok := os.LookupEnv(env); ok {
			f.entries[len(f.entries)-1].fromEnv = true
			return v
		}
	}
	return def
}

// rule is a condition on a setting's value of type T, and what it accepts
// in words ("at least 1").
type rule[T any] struct {
	ok   func(T) bool
	want string
}

// addChecks registers the rules of the setting name, whose value is *p.
func addChecks[T any](f *flags, name string, p *T, rules []rule[T]) {
	for _, r := range rules {
		f.checks = append(f.checks, check{name: name, ok: func() bool { return r.ok(*p) }, want: func() string { return r.want }})
	}
}

// checkAfter adds a rule on the setting name that compares it with others:
// ok and want run once every setting is parsed.
func (f *flags) checkAfter(name string, ok func() bool, want func() string) {
	f.checks = append(f.checks, check{name: name, ok: ok, want: want})
}

// String declares a string setting; rules check its value after parsing.
func (f *flags) String(name, env, def, help string, rules ...rule[string]) *string {
	p := f.fs.String(name, f.add(name, env, def, help), help)
	addChecks(f, name, p, rules)
	return p
}

// Secret declares a string setting that holds a credential: it has no
// default, --help says to give it in the environment, and its value is
// scrubbed from stderr (secretSettings must list it).
func (f *flags) Secret(name, env, help string) *string {
	p := f.String(name, env, "", help)
	f.entries[len(f.entries)-1].secret = true
	return p
}

// Int declares an integer setting; rules check its value after parsing.
func (f *flags) Int(name, env string, def int, help string, rules ...rule[int]) *int {
	v := f.add(name, env, strconv.Itoa(def), help)
	n, err := strconv.Atoi(v)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: not an integer", env, v))
		n = def
	}
	p := f.fs.Int(name, n, help)
	addChecks(f, name, p, rules)
	return p
}

// Duration declares a duration setting; rules check its value after
// parsing.
func (f *flags) Duration(name, env string, def time.Duration, help string, rules ...rule[time.Duration]) *time.Duration {
	v := f.add(name, env, def.String(), help)
	d, err := time.ParseDuration(v)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: not a duration (e.g. 30s, 5m)", env, v))
		d = def
	}
	p := f.fs.Duration(name, d, help)
	addChecks(f, name, p, rules)
	return p
}

func (f *flags) Bool(name, env string, def bool, help string) *bool {
	v := f.add(name, env, strconv.FormatBool(def), help)
	b, err := strconv.ParseBool(v)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: not a boolean", env, v))
		b = def
	}
	return f.fs.Bool(name, b, help)
}

// Repeated declares a flag that may be given several times.
func (f *flags) Repeated(name, help string) *[]string {
	f.entries = append(f.entries, flagEntry{name: name, help: help + " (repeatable)"})
	var vals multi
	f.fs.Var(&vals, name, help)
	return (*[]string)(&vals)
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// parse parses args; -h/--help prints the help to stdout and returns
// errHelp. Flags may come before or after the positional arguments
// (runs RUN_ID --json); after "--" everything is positional.
func (f *flags) parse(args []string, stdout io.Writer) error {
	err := f.parseInterspersed(args)
	if err == flag.ErrHelp {
		f.printHelp(stdout)
		return errHelp
	}
	if err != nil {
		return usageError{fmt.Errorf("%s: %w (see foundryq %s --help)", f.fs.Name(), err, f.fs.Name())}
	}
	if len(f.envErrs) > 0 {
		return usageError{fmt.Errorf("%s: invalid environment: %v", f.fs.Name(), f.envErrs)}
	}
	return f.validate()
}

// validate runs every setting's rules and reports each value that fails,
// with the setting, its environment variable, where the value came from
// and what is accepted.
func (f *flags) validate() error {
	var msgs []string
	for _, c := range f.checks {
		if c.ok() {
			continue
		}
		e := f.entry(c.name)
		setting := "--" + c.name
		if e.env != "" {
			setting += " (" + e.env + ")"
		}
		msgs = append(msgs, fmt.Sprintf("%s %s from %s: want %s", setting, f.shown(e), f.source(e), c.want()))
	}
	if len(msgs) > 0 {
		return usageError{fmt.Errorf("%s: %s", f.fs.Name(), strings.Join(msgs, "; "))}
	}
	return nil
}

// entry returns the declaration of setting name.
func (f *flags) entry(name string) flagEntry {
	for _, e := range f.entries {
		if e.name == name {
			return e
		}
	}
	return flagEntry{name: name}
}

// source says where a setting's value came from: "the command line", "the
// environment" or "the default".
func (f *flags) source(e flagEntry) string {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == e.name })
	switch {
	case set:
		return "the command line"
	case e.fromEnv:
		return "the environment"
	}
	return "the default"
}

// shown is a setting's value as it may be printed: a secret's value never
// is, and the passwords and tokens in URLs are redacted.
func (f *flags) shown(e flagEntry) string {
	v := f.fs.Lookup(e.name).Value.String()
	switch {
	case e.secret && v != "":
		return "[redacted]"
	case secretURLSetting(e.name):
		v = secrets.RedactURLs(v)
	}
	if v == "" || strings.ContainsAny(v, " \t\n\"") {
		return strconv.Quote(v)
	}
	return v
}

func (f *flags) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: foundryq %s\n\nSettings (flag, environment variable, default):\n", f.usage)
	for _, e := range f.entries {
		env := e.env
		if env == "" {
			env = "-"
		}
		def := e.def
		if def == "" {
			def = `""`
		}
		if e.secret {
			// Never a value, and the advice that keeps it out of process lists.
			fmt.Fprintf(w, "  --%-24s %s\n  %-26s env %s (a secret: give it in the environment, not on the command line)\n", e.name, e.help, "", env)
			continue
		}
		fmt.Fprintf(w, "  --%-24s %s\n  %-26s env %s, default %s\n", e.name, e.help, "", env, def)
	}
}

// usageError marks errors caused by how the command was called (exitUsage).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// parseInterspersed parses flags anywhere among args and keeps the
// positional arguments in f.args.
func (f *flags) parseInterspersed(args []string) error {
	for {
		if err := f.fs.Parse(args); err != nil {
			return err
		}
		rest := f.fs.Args()
		if len(rest) == 0 {
			return nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			f.args = append(f.args, rest...)
			return nil
		}
		f.args = append(f.args, rest[0])
		args = rest[1:]
	}
}

// NArg is the number of positional arguments.
func (f *flags) NArg() int { return len(f.args) }

// Arg is the i-th positional argument, or "".
func (f *flags) Arg(i int) string {
	if i < 0 || i >= len(f.args) {
		return ""
	}
	return f.args[i]
}
