// Command guard is the NATS image's entrypoint: it checks the config file
// given to nats-server (--config, -c) with internal/natsguard, refusing
// one in which a password, token or key came out empty (nats-server
// accepts an empty environment variable behind password: $VAR as an empty
// password, so a user without one), then runs /nats-server with the same
// arguments in its place.
//
//	ENTRYPOINT ["/nats-guard"]
//	CMD ["--config", "/etc/nats/nats-server.conf"]
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/foundryq/foundryq/internal/natsguard"
)

// server is the nats-server binary of the image.
const server = "/nats-server"

func main() {
	args := os.Args[1:]
	if path := configPath(args); path != "" {
		if err := natsguard.CheckFile(path); err != nil {
			fmt.Fprintf(os.Stderr, "nats-guard: refusing to start nats-server: %v\n", err)
			os.Exit(2)
		}
	}
	err := syscall.Exec(server, append([]string{server}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "nats-guard: exec %s: %v\n", server, err)
	os.Exit(1)
}

// configPath returns the value of nats-server's config flag in args, as
// Go's flag package reads it (-c, --c, -config, --config, with = or as the
// next argument), or "".
func configPath(args []string) string {
	for i, a := range args {
		if a == "--" {
			return ""
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "c" && name != "config") {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
