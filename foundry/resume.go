package foundry

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/openai/openai-go/v3/option"
)

// Resume re-attaches to the event stream of a background response that was
// created with stream=true: GET responses/{id}?stream=true&starting_after=N. The
// stream continues with the event after sequence number after; a negative after
// replays it from the start. stream=true goes in the query (openai-go's
// GetStreaming puts it in a GET body, openai/openai-go#660, and the server then
// answers with plain JSON).
//
// Errors: ErrResumeExpired once the response is too old to stream (about 5
// minutes; poll with Get), ErrNotBackground for a response not created in
// background mode, ErrNotFound for an unknown id.
func (c *Client) Resume(ctx context.Context, id string, after int64) (*Stream, error) {
	path, err := responsePath(id, "")
	if err != nil {
		return nil, fmt.Errorf("foundry: resume: %w: %v", ErrInvalidRequest, err)
	}
	opts := []option.RequestOption{
		option.WithQuery("stream", "true"),
		option.WithHeader("Accept", "text/event-stream"),
	}
	if !c.cfg.IncludeObfuscation {
		opts = append(opts, option.WithQuery("include_obfuscation", "false"))
	}
	if after >= 0 {
		opts = append(opts, option.WithQuery("starting_after", strconv.FormatInt(after, 10)))
	}
	res, err := c.do(ctx, "resume", id, http.MethodGet, path, nil, opts...)
	if err != nil {
		return nil, err
	}
	if err := checkEventStream("resume", id, res); err != nil {
		return nil, err
	}
	return newStream(ctx, res, id, after, c.cfg.StreamIdleTimeout), nil
}
