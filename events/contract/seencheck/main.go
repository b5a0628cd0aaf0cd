// Command seencheck fails when a property of the wire contract's schemas
// was never seen in the tests' traffic: run the tests with
// FOUNDRYQ_SCHEMA_SEEN_DIR=DIR (the NATS tap and the OpenAPI checker write
// what they validated there), then
//
//	go run ./events/contract/seencheck -dir DIR
//
// A property that only an error case sends, which the tests cannot
// provoke, goes in the allow-list (events/contract/seen-allow.txt) with
// the reason.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/foundryq/foundryq/events/contract"
	"github.com/foundryq/foundryq/events/schema"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("seencheck", flag.ContinueOnError)
	fl.SetOutput(stderr)
	dir := fl.String("dir", os.Getenv(contract.SeenDirEnv), "the directory the tests recorded into (default $"+contract.SeenDirEnv+")")
	allowFile := fl.String("allow", "events/contract/seen-allow.txt", "the allow-list: properties that need not be seen")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "seencheck: no -dir (or $"+contract.SeenDirEnv+")")
		return 2
	}
	set, err := contract.LoadFS(schema.FS(), nil)
	if err != nil {
		fmt.Fprintln(stderr, "seencheck:", err)
		return 1
	}
	seen, err := contract.ReadSeen(*dir)
	if err != nil {
		fmt.Fprintln(stderr, "seencheck:", err)
		return 1
	}
	if len(seen) == 0 {
		fmt.Fprintf(stderr, "seencheck: nothing recorded in %s: did the tests run with %s set?\n", *dir, contract.SeenDirEnv)
		return 1
	}
	allow, err := contract.ReadAllowList(*allowFile)
	if err != nil {
		fmt.Fprintln(stderr, "seencheck:", err)
		return 1
	}
	unseen, stale := contract.Unseen(set, seen, allow)
	for _, p := range unseen {
		fmt.Fprintln(stderr, "never seen in the tests' traffic:", p)
	}
	for _, a := range stale {
		fmt.Fprintln(stderr, "allow-list entry matches no schema property:", a)
	}
	if len(unseen) > 0 || len(stale) > 0 {
		fmt.Fprintf(stderr, "seencheck: %d properties never seen, %d stale allow-list entries: send them in a test, or allow-list an error-only one in %s with the reason\n", len(unseen), len(stale), *allowFile)
		return 1
	}
	fmt.Fprintf(stdout, "seencheck: all %d schema properties seen in traffic or allow-listed (%d seen)\n", len(set.Properties()), len(seen))
	return 0
}
