package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// Conn, when set, is the connection to use instead of dialing NATSURL
	// (dev mode and tests). The gateway does not close it.
	Conn *nats.Conn `json:"-"`
}

// TenantsFile is the layout of a tenants file (Config.Tenants from JSON):
//
//	{"tenants": [
//	  {"name": "acme", "token_sha256": ["sha256:9f86d08..."],
//	   "nats_url": "nats://nats:4222", "nats_creds": "/etc/foundryq/acme.creds", "prefix": "foundryq"}
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
		return nil, fmt.Errorf("gateway: decode tenants (want {\"tenants\": [{\"name\", \"token_sha256\", \"nats_url\", \"nats_creds\", \"prefix\"}]}): %w", err)
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
