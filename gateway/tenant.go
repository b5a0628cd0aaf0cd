package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
)

// Tenant is one tenant of the gateway: the bearer tokens that act for it
// and its own NATS connection settings. NATS accounts are the tenant
// boundary: every request made with one of a tenant's tokens goes through
// the tenant's connection only, so a tenant sees and cancels only the runs
// its NATS account holds. The gateway holds one NATS connection per tenant.
type Tenant struct {
	// Name identifies the tenant in logs and in the tenants file; it must
	// match [A-Za-z0-9_-]{1,64}. Required.
	Name string `json:"name"`
	// TokenSHA256 are the hex SHA-256 digests of the tenant's bearer tokens
	// (64 hex digits, optionally written "sha256:<hex>"). The tokens
	// themselves are never stored: HashToken computes a digest, as does
	// `printf %s "$TOKEN" | sha256sum`.
	TokenSHA256 []string `json:"token_sha256"`
	// NATSURL is the tenant's NATS server URL(s), comma-separated. Default:
	// Config.NATSURL.
	NATSURL string `json:"nats_url,omitempty"`
	// NATSCreds is the path of the credentials file (JWT and seed) of the
	// tenant's NATS user. Default: none (the URL may carry user:password).
	NATSCreds string `json:"nats_creds,omitempty"`
	// Prefix is the tenant's subject prefix. Default: Config.Prefix.
	Prefix string `json:"prefix,omitempty"`
	// CallbackSecretFiles are the files holding the tenant's callback
	// signing keys (one trailing newline dropped; at least 16 bytes each):
	// one, or two while the keys are rotated. Every callback of the tenant
	// carries one v2 signature (HeaderSignatureV2) per key, over the tenant,
	// the delivery and the body, so that no other tenant can sign a
	// callback this tenant's receivers accept. Default: none (only the
	// gateway-wide CallbackConfig.Secret signs, with the first version).
	CallbackSecretFiles []string `json:"callback_secret_files,omitempty"`
	// CallbackSecrets are keys given in process, used with those read from
	// CallbackSecretFiles (two at most in all).
	CallbackSecrets [][]byte `json:"-"`
	// Conn, when set, is the connection to use instead of dialing NATSURL
	// (dev mode and tests). The gateway does not close it.
	Conn *nats.Conn `json:"-"`
}

// TenantsFile is the layout of a tenants file (Config.Tenants from JSON):
//
//	{"tenants": [
//	  {"name": "acme", "token_sha256": ["sha256:9f86d08..."],
//	   "nats_url": "nats://nats:4222", "nats_creds": "/etc/foundryq/acme.creds", "prefix": "foundryq",
//	   "callback_secret_files": ["/etc/foundryq/acme-callback-key"]}
//	]}
type TenantsFile struct {
	Tenants []Tenant `json:"tenants"`
}

// LoadTenants reads a tenants file. Unknown fields are refused, so that a
// misspelt setting is not silently ignored.
func LoadTenants(r io.Reader) ([]Tenant, error) {
	data, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("gateway: read tenants: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f TenantsFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("gateway: decode tenants (want {\"tenants\": [{\"name\", \"token_sha256\", \"nats_url\", \"nats_creds\", \"prefix\", \"callback_secret_files\"}]}): %w", err)
	}
	if dec.More() {
		return nil, errors.New("gateway: decode tenants: data after the JSON document")
	}
	if len(f.Tenants) == 0 {
		return nil, errors.New("gateway: tenants: the file names no tenant")
	}
	return f.Tenants, nil
}

// ParseTokenHashes parses a comma- or whitespace-separated list of token
// digests ("sha256:<hex>" or "<hex>"), as given in an environment variable.
func ParseTokenHashes(s string) ([]string, error) {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		h, err := normalizeHash(f)
		if err != nil {
			return nil, fmt.Errorf("gateway: token hash %d: %w", len(out)+1, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// HashToken returns the digest under which a bearer token is stored:
// "sha256:" and the hex SHA-256 of the token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

var hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)

// normalizeHash returns the 64 lowercase hex digits of a digest written
// "sha256:<hex>" or "<hex>".
func normalizeHash(s string) (string, error) {
	h := strings.ToLower(strings.TrimSpace(s))
	h = strings.TrimPrefix(h, "sha256:")
	if !hexDigest.MatchString(h) {
		return "", errors.New("want the SHA-256 of the token as 64 hex digits (sha256:<hex>), never the token itself")
	}
	return h, nil
}

var tenantName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// tokenDigest is the key under which a presented token is looked up.
func tokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// MaxCallbackKeys is the most callback keys a tenant has at once: the
// current one and the next (or the previous) during a rotation.
const MaxCallbackKeys = 2

// callbackKeys returns the tenant's callback keys: CallbackSecrets, then
// the contents of CallbackSecretFiles.
func (t Tenant) callbackKeys() ([][]byte, error) {
	keys := append([][]byte(nil), t.CallbackSecrets...)
	for i, f := range t.CallbackSecretFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("gateway: tenant %q: callback_secret_files[%d]: %w", t.Name, i, err)
		}
		keys = append(keys, bytes.TrimSuffix(bytes.TrimSuffix(data, []byte("\n")), []byte("\r")))
	}
	if len(keys) > MaxCallbackKeys {
		return nil, fmt.Errorf("gateway: tenant %q: %d callback keys: at most %d (the current one and the next during a rotation)", t.Name, len(keys), MaxCallbackKeys)
	}
	for i, k := range keys {
		if len(k) < 16 {
			return nil, fmt.Errorf("gateway: tenant %q: callback key %d is %d bytes: want at least 16", t.Name, i+1, len(k))
		}
	}
	return keys, nil
}
