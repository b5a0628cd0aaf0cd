package contract

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// SeenDirEnv names the directory where DefaultRecorder writes the schema
// properties a test process saw in traffic (one file per process);
// tools/seencheck reads them.
const SeenDirEnv = "FOUNDRYQ_SCHEMA_SEEN_DIR"

// Recorder records (schema, property) pairs seen in traffic, each once,
// in memory and, when it has a file, appended to it as they are first
// seen (so nothing is lost when a test process ends without a hook).
type Recorder struct {
	mu   sync.Mutex
	seen map[string]bool
	dir  string
	f    *os.File
	err  error
}

// NewRecorder returns a Recorder that writes to a file of its own in dir
// ("" keeps the pairs in memory only).
func NewRecorder(dir string) *Recorder { return &Recorder{seen: map[string]bool{}, dir: dir} }

var (
	defaultOnce sync.Once
	defaultRec  *Recorder
)

// DefaultRecorder is the process's Recorder, writing into the directory
// named by FOUNDRYQ_SCHEMA_SEEN_DIR when it is set.
func DefaultRecorder() *Recorder {
	defaultOnce.Do(func() { defaultRec = NewRecorder(os.Getenv(SeenDirEnv)) })
	return defaultRec
}

// Add records properties ("FILE#POINTER", as Set.Properties lists them).
func (r *Recorder) Add(props ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fresh []string
	for _, p := range props {
		if !r.seen[p] {
			r.seen[p] = true
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 || r.dir == "" || r.err != nil {
		return
	}
	if r.f == nil {
		if r.err = os.MkdirAll(r.dir, 0o755); r.err != nil {
			return
		}
		name := filepath.Join(r.dir, fmt.Sprintf("seen-%d-%s.txt", os.Getpid(), filepath.Base(os.Args[0])))
		if r.f, r.err = os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); r.err != nil {
			return
		}
	}
	_, r.err = r.f.WriteString(strings.Join(fresh, "\n") + "\n")
}

// Seen lists what r recorded, sorted.
func (r *Recorder) Seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.seen))
}

// Err is the first error writing r's file.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// ReadSeen reads every file a Recorder wrote in dir.
func ReadSeen(dir string) (map[string]bool, error) {
	files, err := filepath.Glob(filepath.Join(dir, "seen-*.txt"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				seen[line] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return seen, nil
}

// Unseen returns the properties of s that seen lacks and allow does not
// list (an allow-list entry is a property, or a prefix ending in "/"
// or "#" that covers several), and the allow-list entries that match no
// property of s (stale entries are errors too).
func Unseen(s *Set, seen map[string]bool, allow []string) (unseen, stale []string) {
	used := map[string]bool{}
	for _, p := range s.Properties() {
		if seen[p] {
			continue
		}
		allowed := false
		for _, a := range allow {
			if p == a || (strings.HasSuffix(a, "/") || strings.HasSuffix(a, "#")) && strings.HasPrefix(p, a) {
				allowed, used[a] = true, true
			}
		}
		if !allowed {
			unseen = append(unseen, p)
		}
	}
	props := s.Properties()
	for _, a := range allow {
		if used[a] {
			continue
		}
		found := false
		for _, p := range props {
			if p == a || strings.HasPrefix(p, a) {
				found = true
				break
			}
		}
		if !found {
			stale = append(stale, a)
		}
	}
	return unseen, stale
}

// ReadAllowList reads an allow-list file: one entry per line, each with
// its reason after " #"; blank lines and lines that start with "# " are
// ignored. An entry without a reason is an error.
func ReadAllowList(name string) ([]string, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "# ") {
			continue
		}
		entry, reason, ok := strings.Cut(line, " #")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: %q has no reason (write it after \" # \")", name, i+1, line)
		}
		out = append(out, strings.TrimSpace(entry))
	}
	return out, nil
}
