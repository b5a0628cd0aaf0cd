package main

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// setting names a flag and its environment variable, for messages that
// say what to change.
type setting struct{ flag, env string }

func (s setting) String() string { return "--" + s.flag + " / " + s.env }

// The settings of the addresses the commands listen on.
var (
	devNATSPortSetting   = setting{"nats-port", "FOUNDRYQ_DEV_NATS_PORT"}
	emulatorAddrSetting  = setting{"emulator-addr", "FOUNDRYQ_EMULATOR_ADDR"}    // dev
	emulatorSetting      = setting{"addr", "FOUNDRYQ_EMULATOR_ADDR"}             // emulator
	emulatorPlainSetting = setting{"plain-addr", "FOUNDRYQ_EMULATOR_PLAIN_ADDR"} // emulator
	opsAddrSetting       = setting{"http-addr", "FOUNDRYQ_HTTP_ADDR"}            // worker, dev
	devGatewaySetting    = setting{"gateway-addr", "FOUNDRYQ_DEV_GATEWAY_ADDR"}
	gatewayAddrSetting   = setting{"addr", "FOUNDRYQ_GATEWAY_ADDR"}
)

// listenError is a failure to listen on an address: one line that names
// the setting to change (`port 4222 on 127.0.0.1 is in use (--nats-port /
// FOUNDRYQ_DEV_NATS_PORT)`). The command exits 1.
type listenError struct {
	addr    string
	setting setting
	err     error
}

func (e listenError) Error() string {
	if errors.Is(e.err, syscall.EADDRINUSE) {
		host, port, err := net.SplitHostPort(e.addr)
		switch {
		case err != nil:
			return fmt.Sprintf("%s is in use (%s)", e.addr, e.setting)
		case host == "":
			return fmt.Sprintf("port %s is in use (%s)", port, e.setting)
		}
		return fmt.Sprintf("port %s on %s is in use (%s)", port, host, e.setting)
	}
	cause := e.err
	var op *net.OpError
	if errors.As(cause, &op) && op.Err != nil {
		cause = op.Err // "bind: permission denied", not the address again
	}
	return fmt.Sprintf("cannot listen on %s (%s): %v", e.addr, e.setting, cause)
}

func (e listenError) Unwrap() error { return e.err }

// asListenError returns err as a listenError of addr and s if it is a
// failure to listen (an address in use, not available, not permitted),
// else err.
func asListenError(err error, addr string, s setting) error {
	var le listenError
	var op *net.OpError
	if err == nil || errors.As(err, &le) || !errors.As(err, &op) || op.Op != "listen" {
		return err
	}
	return listenError{addr: addr, setting: s, err: op}
}

// checkFree fails with a listenError if addr cannot be listened on now,
// so that a command stops before it starts anything else. It closes what
// it opened: the caller listens again (a port taken in between fails there,
// with the same message).
func checkFree(addr string, s setting) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return listenError{addr: addr, setting: s, err: err}
	}
	return ln.Close()
}
