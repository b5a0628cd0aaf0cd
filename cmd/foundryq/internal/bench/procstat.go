package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat. Linux reports
// them in USER_HZ, which is 100 on every architecture Go supports.
const clockTick = 10 * time.Millisecond

// ProcUsage is what the OS says one process has used.
type ProcUsage struct {
	// CPU is user plus system time (utime+stime of /proc/PID/stat).
	CPU time.Duration
	// RSS is the resident set size (VmRSS of /proc/PID/status), in bytes.
	RSS int64
}

// readProcUsage reads the CPU time and RSS of process pid from /proc.
func readProcUsage(pid int) (ProcUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcUsage{}, fmt.Errorf("read cpu of process %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted from the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return ProcUsage{}, fmt.Errorf("process %d: malformed stat %q", pid, stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return ProcUsage{}, fmt.Errorf("process %d: short stat %q", pid, stat)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return ProcUsage{}, fmt.Errorf("process %d: bad utime/stime in %q", pid, stat)
	}
	u := ProcUsage{CPU: time.Duration(ut+st) * clockTick}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("read rss of process %d: %w", pid, err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return u, fmt.Errorf("process %d: bad VmRSS %q", pid, rest)
			}
			u.RSS = kb << 10
			return u, nil
		}
	}
	return u, fmt.Errorf("process %d: no VmRSS in status", pid)
}
