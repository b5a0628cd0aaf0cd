package conformance

import (
	"context"
	"crypto/rsa"
	"errors"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

func TestFromEnv(t *testing.T) {
	for _, tt := range []struct {
		name, endpoint, model, key string
		want                       string // "" nil endpoint, "ok", or a piece of the error
	}{
		{"unset", "", "", "", ""},
		{"no model", "https://res.openai.azure.com/openai/v1/", "", "k", EnvModel},
		{"not a v1 URL", "https://res.openai.azure.com/", "m", "k", "/openai/v1"},
		{"not a URL", "res.openai.azure.com", "m", "k", "absolute"},
		{"api key", "https://res.openai.azure.com/openai/v1", "m", "k", "ok"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvEndpoint, tt.endpoint)
			t.Setenv(EnvModel, tt.model)
			t.Setenv(EnvAPIKey, tt.key)
			e, err := FromEnv()
			switch tt.want {
			case "":
				if e != nil || err != nil {
					t.Fatalf("got %v, %v; want nothing", e, err)
				}
			case "ok":
				if err != nil {
					t.Fatal(err)
				}
				if e.BaseURL() != "https://res.openai.azure.com/openai/v1/" || e.Name() != "endpoint" || e.IsEmulator() {
					t.Errorf("endpoint %+v", e)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err %v, want one naming %q", err, tt.want)
				}
			}
		})
	}
}

// The API key is sent: with the wrong one the emulator answers 401.
func TestAPIKeyIsSent(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t)
	wrong, err := New(Config{BaseURL: emu.BaseURL(), Model: EmulatorModel, APIKey: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	r := RunCase(ctx, wrong, caseUnknownID)
	if r.Err != nil || !strings.HasPrefix(r.Observed, "GET 401") {
		t.Errorf("wrong key: %+v", r)
	}
	r = RunCase(ctx, emu.Endpoint, caseUnknownID)
	if r.Observed != caseUnknownID.Want {
		t.Errorf("right key: %+v", r)
	}
}

// Entra ID through azidentity, as package foundry does it: a token for
// the scope foundry picks for each endpoint form, which the emulator
// checks; a credential that gives no token makes the case fail to observe.
func TestEntraID(t *testing.T) {
	t.Parallel()
	auth := foundrytest.NewAuthority(foundrytest.AuthorityConfig{})
	t.Cleanup(auth.Close)
	srv := foundrytest.NewServer(foundrytest.Config{EntraKeys: []*rsa.PublicKey{auth.PublicKey()}})
	t.Cleanup(srv.Close)
	cred, err := auth.Credential()
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	for _, tt := range []struct{ base, scope string }{
		{srv.BaseURL(), foundry.ScopeCognitiveServices},
		{srv.ProjectBaseURL("proj"), foundry.ScopeAIFoundry},
	} {
		e, err := New(Config{BaseURL: tt.base, Model: EmulatorModel, Credential: cred})
		if err != nil {
			t.Fatal(err)
		}
		if e.scope != tt.scope {
			t.Errorf("%s: scope %s, want %s", tt.base, e.scope, tt.scope)
		}
		if r := RunCase(ctx, e, caseUnknownID); r.Observed != caseUnknownID.Want {
			t.Errorf("%s: %+v", tt.base, r)
		}
		e.hc.CloseIdleConnections()
	}
	if got := auth.Scopes(); len(got) == 0 {
		t.Error("no token was asked for")
	}

	e, err := New(Config{BaseURL: srv.BaseURL(), Model: EmulatorModel, Credential: failing{}})
	if err != nil {
		t.Fatal(err)
	}
	if r := RunCase(ctx, e, caseUnknownID); r.Err == nil || !strings.Contains(r.Err.Error(), "Entra ID token") {
		t.Errorf("failing credential: %+v", r)
	}
}

type failing struct{}

func (failing) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, errors.New("no login")
}

func TestNewNeedsAModel(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{BaseURL: "https://res.openai.azure.com/openai/v1/", APIKey: "k"}); err == nil || !strings.Contains(err.Error(), "Model") {
		t.Fatalf("err %v", err)
	}
}
