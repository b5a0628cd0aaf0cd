package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// flags is a flag set whose settings can also come from the environment.
// Precedence: command line, then environment variable, then default.
type flags struct {
	fs      *flag.FlagSet
	usage   string
	entries []flagEntry
	envErrs []error
	args    []string // positional arguments, after parse
}

type flagEntry struct {
	name, env, def, help string
	secret               bool
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
			return v
		}
	}
	return def
}

func (f *flags) String(name, env, def, help string) *string {
	return f.fs.String(name, f.add(name, env, def, help), help)
}

// Secret declares a string setting that holds a credential: it has no
// default, --help says to give it in the environment, and its value is
// scrubbed from stderr (secretSettings must list it).
func (f *flags) Secret(name, env, help string) *string {
	p := f.String(name, env, "", help)
	f.entries[len(f.entries)-1].secret = true
	return p
}

func (f *flags) Int(name, env string, def int, help string) *int {
	v := f.add(name, env, strconv.Itoa(def), help)
	n, err := strconv.Atoi(v)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: not an integer", env, v))
		n = def
	}
	return f.fs.Int(name, n, help)
}

func (f *flags) Duration(name, env string, def time.Duration, help string) *time.Duration {
	v := f.add(name, env, def.String(), help)
	d, err := time.ParseDuration(v)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: not a duration (e.g. 30s, 5m)", env, v))
		d = def
	}
	return f.fs.Duration(name, d, help)
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
	return nil
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
