package foundry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// Client talks to the Responses API of one v1 endpoint. It is safe for concurrent use.
type Client struct {
	cfg    Config
	oa     openai.Client
	tokens *tokenSource // nil with an API key
}

// New validates cfg and returns a Client. Without an APIKey it uses cfg.Credential,
// or azidentity.NewDefaultAzureCredential when that is nil (no token is requested
// until the first call).
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	if cfg.APIKey == "" {
		cred := cfg.Credential
		if cred == nil {
			dc, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("%w: Credential: no APIKey and DefaultAzureCredential failed: %w", ErrInvalidConfig, err)
			}
			cred = dc
		}
		c.tokens = newTokenSource(cred, cfg.Scope)
	}
	// Every option is explicit: openai.NewClient also reads OPENAI_* environment
	// variables, so the base URL, keys and identifying headers are overridden here
	// and the auth middleware removes whatever else could carry a credential.
	c.oa = openai.NewClient(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(""),
		option.WithAdminAPIKey(""),
		option.WithHeaderDel("OpenAI-Organization"),
		option.WithHeaderDel("OpenAI-Project"),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(cfg.MaxRetries),
		option.WithMiddleware(traceMiddleware, c.authMiddleware),
	)
	return c, nil
}

// BaseURL returns the normalised base URL (with a trailing slash).
func (c *Client) BaseURL() string { return c.cfg.BaseURL }

// Scope returns the Entra ID scope in use, or "" with an API key.
func (c *Client) Scope() string {
	if c.tokens == nil {
		return ""
	}
	return c.cfg.Scope
}

// do sends one request through openai-go (base URL, auth middleware, retries) and
// returns the raw response with a 2xx status, unread. Any status >= 400 becomes an
// *APIError carrying the server's code and message.
func (c *Client) do(ctx context.Context, op, id, method, path string, body any, opts ...option.RequestOption) (*http.Response, error) {
	if c.tokens != nil {
		// Get the token before the SDK sends anything: a failure inside the
		// middleware looks like a connection error to openai-go, which retries
		// it with backoff, whereas a credential that cannot give a token is an
		// authentication failure (ErrAuth) to report at once. The middleware
		// then finds the token cached.
		if _, err := c.tokens.token(ctx); err != nil {
			return nil, fmt.Errorf("foundry: %s: %w", opName(op, id), err)
		}
	}
	var res *http.Response
	err := c.oa.Execute(ctx, method, path, body, &res, opts...)
	if res != nil && res.StatusCode >= 400 {
		apiErr := newAPIError(op, id, res)
		closeBody(res)
		return nil, apiErr
	}
	if err != nil {
		if res != nil {
			closeBody(res)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("foundry: %s: %w", opName(op, id), context.Cause(ctx))
		}
		if kind := notSent(err); kind != nil {
			return nil, fmt.Errorf("foundry: %s: %w: %w", opName(op, id), kind, err)
		}
		return nil, fmt.Errorf("foundry: %s: %w", opName(op, id), err)
	}
	if res == nil {
		return nil, fmt.Errorf("foundry: %s: no response", opName(op, id))
	}
	return res, nil
}

func opName(op, id string) string {
	if id == "" {
		return op
	}
	return op + " " + id
}

// closeBody drains a little of the body (so the connection can be reused) and closes it.
func closeBody(res *http.Response) {
	if res == nil || res.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, res.Body, 4<<10)
	_ = res.Body.Close()
}

// responsePath is "responses/{id}" plus an optional suffix, with the id escaped.
func responsePath(id, suffix string) (string, error) {
	if id == "" {
		return "", errors.New("empty response id")
	}
	switch id {
	case ".":
		id = "%2E"
	case "..":
		id = "%2E%2E"
	default:
		id = url.PathEscape(id)
	}
	return "responses/" + id + suffix, nil
}

// checkResponseID is the response id Check asks for: one that no response
// has.
const checkResponseID = "resp_foundryq_upstream_check"

// Check makes one cheap authenticated request (GET responses/<an id no
// response has>, not retried) to tell whether the endpoint can be reached
// and takes the credential. Any answer other than 401, 403 or a 5xx means
// it can (the 404 for the unknown id is the expected one); otherwise the
// error says why: ErrAuth (a 401 or 403, or no Entra ID token),
// ErrHostNotFound, ErrTLSVerification, an *APIError with a 5xx status, or
// the network error.
func (c *Client) Check(ctx context.Context) error {
	path, _ := responsePath(checkResponseID, "")
	res, err := c.do(ctx, "check", "", http.MethodGet, path, nil, option.WithMaxRetries(0))
	if err == nil {
		closeBody(res)
		return nil
	}
	var apiErr *APIError
	if errors.As(err, &apiErr) && !apiErr.Is(ErrAuth) && apiErr.StatusCode < 500 {
		return nil
	}
	return err
}

// CloseIdleConnections closes the HTTP connections that no request is using,
// e.g. when a program that used the client is done with it.
func (c *Client) CloseIdleConnections() { c.cfg.HTTPClient.CloseIdleConnections() }
