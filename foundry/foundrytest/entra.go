package foundrytest

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Entra ID audiences (token "aud") per endpoint form: an Azure OpenAI
// resource (/openai/v1/) wants tokens for https://cognitiveservices.azure.com,
// a Foundry project (/api/projects/{project}/openai/v1/) tokens for
// https://ai.azure.com (Microsoft Learn: Azure OpenAI "Responses API"
// troubleshooting, and the Foundry quickstart's
// `az account get-access-token --scope https://ai.azure.com/.default`).
const (
	AudienceCognitiveServices = "https://cognitiveservices.azure.com"
	AudienceAIFoundry         = "https://ai.azure.com"
)

// maxTokenBytes bounds the bearer token the emulator parses.
const maxTokenBytes = 16 << 10

// audiencesFor are the audiences the endpoint form of path accepts, the
// one named in errors first. An Azure OpenAI resource's /openai/v1 also
// accepts tokens for https://ai.azure.com: microsoft/agent-framework's
// samples get them with the scope https://ai.azure.com/.default and call
// /openai/v1 with them.
func audiencesFor(path string) []string {
	if strings.HasPrefix(path, "/api/projects/") {
		return []string{AudienceAIFoundry}
	}
	return []string{AudienceCognitiveServices, AudienceAIFoundry}
}

// errTokenRejected is the Azure API gateway's 401 for a bearer token it
// does not accept (missing, malformed, wrong audience, expired): a
// {"statusCode","message"} body, not the API's error object (reported in
// many threads, e.g. Azure-Samples/azure-search-openai-demo#458).
func errTokenRejected(audience string) *apiError {
	return &apiError{status: http.StatusUnauthorized, gateway: true,
		message: "Unauthorized. Access token is missing, invalid, audience is incorrect (" + audience + "), or have expired."}
}

// checkEntraToken verifies an RS256 JWT: signed by one of keys, aud equal to
// one of audiences (a trailing slash ignored), now within [nbf, exp).
func checkEntraToken(tok string, keys []*rsa.PublicKey, audiences []string, now time.Time) bool {
	if len(tok) > maxTokenBytes {
		return false
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return false
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if !decodeSegment(parts[0], &header) || header.Alg != "RS256" {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	signed := false
	for _, k := range keys {
		if rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return false
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
		Exp *float64        `json:"exp"`
		Nbf *float64        `json:"nbf"`
	}
	if !decodeSegment(parts[1], &claims) || claims.Exp == nil {
		return false
	}
	unix := float64(now.UnixNano()) / 1e9
	if unix >= *claims.Exp || (claims.Nbf != nil && unix < *claims.Nbf) {
		return false
	}
	var auds []string
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		auds = []string{one}
	} else if json.Unmarshal(claims.Aud, &auds) != nil {
		return false
	}
	for _, a := range auds {
		for _, want := range audiences {
			if strings.TrimSuffix(a, "/") == want {
				return true
			}
		}
	}
	return false
}

// decodeSegment decodes one base64url JSON segment of a JWT into v.
func decodeSegment(seg string, v any) bool {
	data, err := base64.RawURLEncoding.DecodeString(seg)
	return err == nil && json.Unmarshal(data, v) == nil
}
