package secrets

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/rs/zerolog"
)

// DefaultEnvPrefix starts the name of the environment variable that holds
// a secret: FOUNDRYQ_SECRET_<NAME>.
const DefaultEnvPrefix = "FOUNDRYQ_SECRET_"

// MaxNameLen is the longest secret name.
const MaxNameLen = 128

// Errors of ResolveTools, wrapped in a *ReferenceError.
var (
	// ErrBadReference: a header value or authorization is neither a string
	// nor {"secret": NAME} with a valid NAME.
	ErrBadReference = errors.New("bad secret reference")
	// ErrSecretNotFound: no file and no environment variable holds the secret.
	ErrSecretNotFound = errors.New("secret not found")
	// ErrSecretNotAllowed: the secret may not be sent to the tool's server.
	ErrSecretNotAllowed = errors.New("secret not allowed for this server")
)

// ReferenceError says which field of which tool held a reference that
// could not be resolved, and what is wrong with the request. It is stored
// where every submitter may read it (run state, run events, dead
// letters), so it never carries a secret value nor the worker's
// configuration: not the hosts a secret may go to, the secrets directory
// or the variable names. The Resolver logs those at debug level.
type ReferenceError struct {
	Field string // e.g. tools[0].headers.Authorization
	Name  string // the secret's name, if the reference had a valid one
	Err   error  // ErrBadReference, ErrSecretNotFound or ErrSecretNotAllowed, wrapped with what is wrong
}

func (e *ReferenceError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("secrets: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("secrets: %s: secret %q: %v", e.Field, e.Name, e.Err)
}

func (e *ReferenceError) Unwrap() error { return e.Err }

// Config configures a Resolver.
type Config struct {
	// Dir is a directory with one file per secret, named after it (a
	// mounted Kubernetes Secret). The file's content is the value, without
	// one trailing newline. Empty: no directory.
	Dir string
	// EnvPrefix starts the environment variable of a secret: the name is
	// upper-cased and '-' and '.' become '_' (crm-token:
	// FOUNDRYQ_SECRET_CRM_TOKEN). Default DefaultEnvPrefix.
	EnvPrefix string
	// LookupEnv reads the environment. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Hosts lists, for each secret name, where it may be sent: host names
	// of a tool's https server_url ("crm.example.com", or "*.example.com"
	// for any subdomain), or the ids a tool may name instead or beside it
	// (connector_id, tunnel_id, project_connection_id; compared without
	// case, never as a wildcard). A secret with no entry is never sent.
	// See ParseHosts.
	Hosts map[string][]string
	// Logger gets, at debug level, why each reference was refused with the
	// details the error leaves out (the secret's hosts, the directory, the
	// variable name); never a value. Default: no log.
	Logger *zerolog.Logger
}

// Resolver replaces secret references in tools with the secrets' values.
// A nil *Resolver is valid: it resolves nothing and refuses every
// reference. Safe for concurrent use; files are read at each resolution,
// so a rotated Kubernetes Secret takes effect without a restart.
type Resolver struct {
	none      bool // no secret store: behaves as a nil *Resolver, with a log
	dir       string
	envPrefix string
	lookupEnv func(string) (string, bool)
	hosts     map[string][]string
	log       zerolog.Logger
}

// NewResolver checks cfg (the directory exists, names and hosts are
// valid) and returns a Resolver.
func NewResolver(cfg Config) (*Resolver, error) {
	r := &Resolver{dir: cfg.Dir, envPrefix: cfg.EnvPrefix, lookupEnv: cfg.LookupEnv, hosts: map[string][]string{}, log: zerolog.Nop()}
	if cfg.Logger != nil {
		r.log = *cfg.Logger
	}
	if r.envPrefix == "" {
		r.envPrefix = DefaultEnvPrefix
	}
	if r.lookupEnv == nil {
		r.lookupEnv = os.LookupEnv
	}
	if r.dir != "" {
		fi, err := os.Stat(r.dir)
		if err != nil {
			return nil, fmt.Errorf("secrets: directory: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("secrets: directory %s is not a directory", r.dir)
		}
	}
	for name, hosts := range cfg.Hosts {
		if !ValidName(name) {
			return nil, fmt.Errorf("secrets: hosts: secret name %q must match [A-Za-z0-9][A-Za-z0-9_.-]{0,127} without \"..\"", name)
		}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, "/:@ \t") || strings.Count(h, "*") > 1 || (strings.Contains(h, "*") && !strings.HasPrefix(h, "*.")) {
				return nil, fmt.Errorf("secrets: hosts of %q: %q is not a host name, *.domain or connector id", name, h)
			}
			r.hosts[name] = append(r.hosts[name], strings.ToLower(h))
		}
	}
	return r, nil
}

// WithLogger returns a copy of r that logs refusals to l (see
// Config.Logger). On a nil *Resolver it returns one that, like nil,
// refuses every reference, and logs why.
func (r *Resolver) WithLogger(l zerolog.Logger) *Resolver {
	if r == nil {
		return &Resolver{none: true, envPrefix: DefaultEnvPrefix, log: l}
	}
	c := *r
	c.log = l
	return &c
}

// ParseHosts parses the --secret-hosts setting: entries NAME=HOST[,HOST...]
// separated by ';' or white space, e.g.
// "crm-token=crm.example.com billing=*.billing.example.com".
func ParseHosts(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, entry := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ' ' || r == '\t' || r == '\n' }) {
		name, list, ok := strings.Cut(entry, "=")
		if !ok || name == "" || list == "" {
			return nil, fmt.Errorf("secrets: secret hosts entry %q: want NAME=HOST[,HOST...]", entry)
		}
		for _, h := range strings.Split(list, ",") {
			if h = strings.TrimSpace(h); h != "" {
				out[name] = append(out[name], h)
			}
		}
	}
	return out, nil
}

// ValidName reports whether name can name a secret: it matches
// [A-Za-z0-9][A-Za-z0-9_.-]{0,127} and holds no "..", so it is a plain
// file name.
func ValidName(name string) bool {
	if name == "" || len(name) > MaxNameLen || strings.Contains(name, "..") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// EnvName returns the environment variable that holds the secret name.
func (r *Resolver) EnvName(name string) string {
	prefix := DefaultEnvPrefix
	if r != nil && r.envPrefix != "" {
		prefix = r.envPrefix
	}
	return prefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

// Lookup returns the value of the secret name: the file name in the
// directory (without one trailing newline), else the environment
// variable. An empty value counts as missing. Its error says what is
// wrong without naming the directory or the variable (see
// ReferenceError); they go to the log at debug level.
func (r *Resolver) Lookup(name string) (string, error) {
	v, detail, err := r.lookup(name)
	if err != nil {
		r.debug(name, "", err, detail)
	}
	return v, err
}

// lookup is Lookup with the details for the operator kept apart.
func (r *Resolver) lookup(name string) (value, detail string, err error) {
	if !ValidName(name) {
		return "", "", fmt.Errorf("%w: a secret's name must match [A-Za-z0-9][A-Za-z0-9_.-]{0,127} without \"..\"", ErrBadReference)
	}
	if r == nil || r.none {
		return "", "the worker has no secret store (set --secrets-dir or " + DefaultEnvPrefix + "<NAME> variables)", ErrSecretNotFound
	}
	var where []string
	if r.dir != "" {
		v, err := r.readFile(name)
		switch {
		case err == nil && v != "":
			return v, "", nil
		case err == nil:
			where = append(where, "file "+name+" in "+r.dir+" is empty")
		case errors.Is(err, fs.ErrNotExist):
			where = append(where, "no file "+name+" in "+r.dir)
		default:
			return "", fmt.Sprintf("read %s in %s: %v", name, r.dir, errors.Unwrap(err)), ErrSecretNotFound
		}
	}
	env := r.EnvName(name)
	if v, ok := r.lookupEnv(env); ok && v != "" {
		return v, "", nil
	}
	where = append(where, "no "+env+" in the environment")
	return "", strings.Join(where, ", "), ErrSecretNotFound
}

// debug logs why a reference was refused, with what the error leaves out.
func (r *Resolver) debug(name, field string, err error, detail string) {
	if r == nil {
		return // no logger; WithLogger gives a nil resolver one
	}
	e := r.log.Debug().Str("secret", name).Err(err)
	if field != "" {
		e = e.Str("field", field)
	}
	e.Str("detail", detail).Msg("secret reference refused")
}

// readFile reads name inside the directory; os.Root keeps a symbolic
// link from leading outside it (Kubernetes' own links stay inside).
func (r *Resolver) readFile(name string) (string, error) {
	root, err := os.OpenRoot(r.dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	b, err := root.ReadFile(name)
	if err != nil {
		return "", err
	}
	s := string(b)
	if t, ok := strings.CutSuffix(s, "\n"); ok {
		s = strings.TrimSuffix(t, "\r")
	}
	return s, nil
}

// mcpFields are the fields of an MCP tool, the only tool that may carry a
// secret reference: those of openai-go's responses.ToolMcpParam (v3.98.0,
// responses/response.go: type, server_label, server_url, connector_id,
// tunnel_id, authorization, headers, allowed_tools, require_approval,
// server_description, defer_loading, allowed_callers) and Foundry's
// project_connection_id (a project connection that authenticates the MCP
// server: learn.microsoft.com/azure/foundry/agents/how-to/tools/model-context-protocol).
// A tool that references a secret may hold no other field: a field this
// list does not know (Server_URL, serverUrl, url, endpoint, ...) could
// send the call, and so the secret, somewhere the check never saw, as a
// lenient parser may read Server_URL as server_url.
var mcpFields = map[string]bool{
	"type": true, "server_label": true, "server_url": true, "connector_id": true, "tunnel_id": true,
	"project_connection_id": true, "authorization": true, "headers": true, "allowed_tools": true,
	"require_approval": true, "server_description": true, "defer_loading": true, "allowed_callers": true,
}

// destinations are the fields of an MCP tool that say where its calls go
// (ToolMcpParam: "One of server_url, connector_id, or tunnel_id must be
// provided"; Foundry: project_connection_id). Every one the tool gives
// must be allowed for the secret.
var destinations = []string{"server_url", "connector_id", "tunnel_id", "project_connection_id"}

// canonical folds a field name for comparison: lower case, without '_'
// and '-' (Server_URL, serverUrl and server-url are all server_url).
func canonical(k string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(k))
}

// allowed checks that the secret name may be sent where the tool's calls
// go. The error says what is wrong with the tool, never the secret's
// hosts; detail adds them, for the log.
func (r *Resolver) allowed(name string, tool map[string]json.RawMessage) (detail string, err error) {
	var typ string
	if json.Unmarshal(tool["type"], &typ) != nil || typ != "mcp" {
		return "", fmt.Errorf("%w: only a tool of type \"mcp\" may carry a secret reference", ErrSecretNotAllowed)
	}
	keys := make([]string, 0, len(tool))
	for k := range tool {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same error every time
	for _, k := range keys {
		if mcpFields[k] {
			continue
		}
		for f := range mcpFields {
			if canonical(f) == canonical(k) {
				return "", fmt.Errorf("%w: field %q: write it %q (a tool with a secret reference may hold only the fields of an MCP tool, spelt as Foundry documents them)", ErrSecretNotAllowed, k, f)
			}
		}
		return "", fmt.Errorf("%w: field %q is not a field of an MCP tool (a tool with a secret reference may hold only those)", ErrSecretNotAllowed, k)
	}
	hosts := r.hosts[name]
	given := 0
	for _, f := range destinations {
		raw, ok := tool[f]
		if !ok || isJSONNull(raw) {
			continue
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			return "", fmt.Errorf("%w: %s must be a string", ErrSecretNotAllowed, f)
		}
		if v == "" {
			continue
		}
		given++
		if f == "server_url" {
			if detail, err := serverAllowed(v, hosts); err != nil {
				return detail, err
			}
			continue
		}
		if !idAllowed(v, hosts) {
			return fmt.Sprintf("%s %q is not one of the secret's hosts %v (--secret-hosts)", f, v, hosts), fmt.Errorf("%w: not to this tool's %s", ErrSecretNotAllowed, f)
		}
	}
	if given == 0 {
		return "", fmt.Errorf("%w: the tool names no server_url, connector_id, tunnel_id or project_connection_id", ErrSecretNotAllowed)
	}
	return "", nil
}

// serverAllowed checks an MCP server_url against the secret's hosts.
func serverAllowed(serverURL string, hosts []string) (detail string, err error) {
	u, perr := url.Parse(serverURL)
	if perr != nil || u.Host == "" {
		return "", fmt.Errorf("%w: server_url is not an absolute URL", ErrSecretNotAllowed)
	}
	if u.Scheme != "https" {
		return "", fmt.Errorf("%w: server_url must be https", ErrSecretNotAllowed)
	}
	if u.User != nil {
		// https://crm.example.com@evil.example.net: a reader sees one host,
		// the client dials another.
		return "", fmt.Errorf("%w: server_url may not hold user information", ErrSecretNotAllowed)
	}
	host := strings.ToLower(u.Hostname())
	for _, h := range hosts {
		if h == host || (strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]) && len(host) > len(h)-1) {
			return "", nil
		}
	}
	return fmt.Sprintf("server_url host %s is not one of the secret's hosts %v (--secret-hosts)", host, hosts), fmt.Errorf("%w: not to this server_url's host", ErrSecretNotAllowed)
}

// idAllowed reports whether a connector, tunnel or connection id is one of
// the secret's entries (compared without case; never a wildcard).
func idAllowed(id string, hosts []string) bool {
	for _, h := range hosts {
		if !strings.HasPrefix(h, "*.") && strings.EqualFold(h, id) {
			return true
		}
	}
	return false
}

// HasReferences reports whether any tool holds a secret reference.
func HasReferences(tools []json.RawMessage) bool {
	for _, t := range tools {
		var tool map[string]json.RawMessage
		if json.Unmarshal(t, &tool) != nil {
			continue
		}
		if _, ok := reference(tool["authorization"]); ok {
			return true
		}
		var headers map[string]json.RawMessage
		if json.Unmarshal(tool["headers"], &headers) == nil {
			for _, v := range headers {
				if _, ok := reference(v); ok {
					return true
				}
			}
		}
	}
	return false
}

// reference reports whether raw is an object with a "secret" key, and
// returns the raw object.
func reference(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	var obj map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &obj) != nil || obj == nil {
		return nil, false
	}
	_, ok := obj["secret"]
	return obj, ok
}

// ResolveTools returns tools with every secret reference replaced by the
// secret's value: a value of the tool's "headers" object, or its
// "authorization", written as {"secret": NAME}. Tools without references
// are returned unchanged (the same bytes); the others are re-encoded. A
// tool with a reference must pass the destination check (see allowed).
// The first reference that cannot be resolved gives a *ReferenceError
// naming the field and the secret (never its value nor the worker's
// configuration, which goes to the log at debug level).
func (r *Resolver) ResolveTools(tools []json.RawMessage) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		out[i] = t
		var tool map[string]json.RawMessage
		if json.Unmarshal(t, &tool) != nil {
			continue // not an object: nothing to resolve (validation reports it)
		}
		changed := false
		field := fmt.Sprintf("tools[%d]", i)
		if raw, ok := tool["authorization"]; ok && !isJSONString(raw) && !isJSONNull(raw) {
			v, err := r.resolveValue(field+".authorization", raw, tool)
			if err != nil {
				return nil, err
			}
			tool["authorization"], changed = v, true
		}
		if raw, ok := tool["headers"]; ok {
			var headers map[string]json.RawMessage
			if json.Unmarshal(raw, &headers) != nil {
				return nil, &ReferenceError{Field: field + ".headers", Err: fmt.Errorf("%w: headers must be an object of strings or {\"secret\": NAME}", ErrBadReference)}
			}
			if _, isRef := reference(raw); isRef {
				return nil, &ReferenceError{Field: field + ".headers", Err: fmt.Errorf("%w: a reference goes in each header's value, not in place of the headers object", ErrBadReference)}
			}
			names := make([]string, 0, len(headers))
			for k := range headers {
				names = append(names, k)
			}
			sort.Strings(names) // the first error is the same every time
			hchanged := false
			for _, k := range names {
				if isJSONString(headers[k]) || isJSONNull(headers[k]) {
					continue
				}
				v, err := r.resolveValue(field+".headers."+k, headers[k], tool)
				if err != nil {
					return nil, err
				}
				headers[k], hchanged = v, true
			}
			if hchanged {
				b, err := marshal(headers)
				if err != nil {
					return nil, fmt.Errorf("secrets: %s.headers: %w", field, err)
				}
				tool["headers"], changed = b, true
			}
		}
		if changed {
			b, err := marshal(tool)
			if err != nil {
				return nil, fmt.Errorf("secrets: %s: %w", field, err)
			}
			out[i] = b
		}
	}
	return out, nil
}

// resolveValue turns {"secret": NAME} into the JSON string of its value.
func (r *Resolver) resolveValue(field string, raw json.RawMessage, tool map[string]json.RawMessage) (json.RawMessage, error) {
	obj, ok := reference(raw)
	if !ok || len(obj) != 1 {
		return nil, &ReferenceError{Field: field, Err: fmt.Errorf("%w: want a string or {\"secret\": NAME}", ErrBadReference)}
	}
	var name string
	if json.Unmarshal(obj["secret"], &name) != nil || !ValidName(name) {
		return nil, &ReferenceError{Field: field, Err: fmt.Errorf("%w: the secret's name must be a string matching [A-Za-z0-9][A-Za-z0-9_.-]{0,127} without \"..\"", ErrBadReference)}
	}
	if r == nil || r.none {
		_, detail, err := r.lookup(name)
		r.debug(name, field, err, detail)
		return nil, &ReferenceError{Field: field, Name: name, Err: err}
	}
	if detail, err := r.allowed(name, tool); err != nil {
		if len(r.hosts[name]) == 0 && detail != "" {
			detail = "no hosts are configured for it (--secret-hosts " + name + "=HOST)"
		}
		r.debug(name, field, err, detail)
		return nil, &ReferenceError{Field: field, Name: name, Err: err}
	}
	v, detail, err := r.lookup(name)
	if err != nil {
		r.debug(name, field, err, detail)
		return nil, &ReferenceError{Field: field, Name: name, Err: err}
	}
	b, err := marshal(v)
	if err != nil {
		return nil, &ReferenceError{Field: field, Name: name, Err: err}
	}
	return b, nil
}

func isJSONString(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return len(t) > 0 && t[0] == '"'
}

func isJSONNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

// marshal encodes v without HTML escaping (values go to Foundry as given).
func marshal(v any) (json.RawMessage, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return json.RawMessage(strings.TrimSuffix(b.String(), "\n")), nil
}
