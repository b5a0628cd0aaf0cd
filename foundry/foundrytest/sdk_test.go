package foundrytest

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// sdkClient is an openai-go client for srv, as foundryq builds it.
func sdkClient(srv *Server, c *http.Client, key string, retries int) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(srv.BaseURL()),
		option.WithAPIKey(key),
		option.WithMaxRetries(retries),
		option.WithHTTPClient(c),
	)
}

func sdkParams(runID string, background bool, md map[string]string) responses.ResponseNewParams {
	meta := shared.Metadata{"run_id": runID}
	for k, v := range md {
		meta[k] = v
	}
	return responses.ResponseNewParams{
		Model:      "gpt-test",
		Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me about " + runID)},
		Background: openai.Bool(background),
		Store:      openai.Bool(true),
		Metadata:   meta,
		Tools: []responses.ToolUnionParam{{OfMcp: &responses.ToolMcpParam{
			ServerLabel: "kb", ServerURL: openai.String("https://mcp.example/"),
			RequireApproval: responses.ToolMcpRequireApprovalUnionParam{OfMcpToolApprovalSetting: openai.String("never")},
		}}},
	}
}

// sdkEvent is what the tests keep of an SDK stream event.
type sdkEvent struct {
	typ   string
	seq   int64
	delta string
	ev    responses.ResponseStreamEventUnion
}

func TestSDKStreamResumeGetCancel(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	client := sdkClient(srv, c, testKey, 0)

	stream := client.Responses.NewStreaming(ctx, sdkParams("sdk", true, map[string]string{KeyTokens: "12", KeyToolMS: "5"}))
	var evs []sdkEvent
	for stream.Next() {
		ev := stream.Current()
		evs = append(evs, sdkEvent{typ: ev.Type, seq: ev.SequenceNumber, delta: ev.Delta, ev: ev})
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	sawTool := false
	for i, e := range evs {
		if e.seq != int64(i) || !e.ev.JSON.SequenceNumber.Valid() {
			t.Fatalf("event %d (%s) has sequence_number %d", i, e.typ, e.seq)
		}
		switch v := e.ev.AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			text.WriteString(v.Delta)
		case responses.ResponseOutputItemDoneEvent:
			if v.Item.Type == "mcp_call" {
				call := v.Item.AsMcpCall()
				sawTool = call.ServerLabel == "kb" && call.Output != "" && call.Status == "completed"
			}
		}
	}
	created := evs[0].ev.AsResponseCreated().Response
	last := evs[len(evs)-1].ev
	if evs[1].typ != "response.queued" || created.Status != "queued" || !sawTool || last.Type != "response.completed" {
		t.Fatalf("events: created %s tool %v last %s", created.Status, sawTool, last.Type)
	}
	final := last.AsResponseCompleted().Response
	if final.OutputText() != text.String() || final.Usage.OutputTokens != 12 ||
		final.Usage.TotalTokens != final.Usage.InputTokens+12 || !final.Usage.JSON.InputTokensDetails.Valid() {
		t.Fatalf("completed: text %q vs %q, usage %+v", final.OutputText(), text.String(), final.Usage)
	}

	// Resume after N, with the query workaround for openai-go#660.
	const n = 6
	resumed := client.Responses.GetStreaming(ctx, created.ID,
		responses.ResponseGetParams{StartingAfter: openai.Int(n)}, option.WithQuery("stream", "true"))
	i := n + 1
	for resumed.Next() {
		ev := resumed.Current()
		if ev.SequenceNumber != int64(i) || ev.Type != evs[i].typ || ev.Delta != evs[i].delta {
			t.Fatalf("resumed event %d: %s/%d, want %s", i, ev.Type, ev.SequenceNumber, evs[i].typ)
		}
		i++
	}
	if err := resumed.Err(); err != nil || i != len(evs) {
		t.Fatalf("resume ended at %d of %d: %v", i, len(evs), err)
	}

	// Without the workaround the SDK sends stream in a GET body: the server
	// answers JSON and the stream is silently empty, as on the real service.
	buggy := client.Responses.GetStreaming(ctx, created.ID, responses.ResponseGetParams{StartingAfter: openai.Int(n)})
	if buggy.Next() || buggy.Err() != nil {
		t.Fatalf("GetStreaming without stream=true in the query should yield nothing: %v", buggy.Err())
	}

	got, err := client.Responses.Get(ctx, created.ID, responses.ResponseGetParams{})
	if err != nil || got.Status != "completed" || got.OutputText() != text.String() || got.Metadata["run_id"] != "sdk" {
		t.Fatalf("Get: %v %+v", err, got)
	}
	// A completed response cannot be cancelled: 400, which the SDK reports.
	_, err = client.Responses.Cancel(ctx, created.ID)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Message != "Cannot cancel a completed response." {
		t.Fatalf("Cancel of a finished response: %v", err)
	}
}

func TestSDKCancel(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	client := sdkClient(srv, c, testKey, 0)

	stream := client.Responses.NewStreaming(ctx, sdkParams("sdk-cancel", true, map[string]string{KeyTokens: "100000", KeyTokenMS: "2"}))
	var id string
	deltas := 0
	for deltas < 5 && stream.Next() {
		ev := stream.Current()
		if ev.Type == "response.created" {
			id = ev.Response.ID
		}
		if ev.Type == "response.output_text.delta" {
			deltas++
		}
	}
	cancelled, err := client.Responses.Cancel(ctx, id)
	if err != nil || cancelled.Status != "cancelled" || cancelled.Usage.OutputTokens < 5 {
		t.Fatalf("Cancel: %v %+v", err, cancelled)
	}
	// The stream drains what was emitted and ends without a terminal event
	// and without error: the SDK cannot tell, so clients must track it.
	for stream.Next() {
		switch typ := stream.Current().Type; typ {
		case "response.completed", "response.failed", "response.incomplete":
			t.Fatalf("terminal event %s after a cancel", typ)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream after cancel: %v", err)
	}
	got, err := client.Responses.Get(ctx, id, responses.ResponseGetParams{})
	if err != nil || got.Status != "cancelled" || got.Usage.OutputTokens != cancelled.Usage.OutputTokens {
		t.Fatalf("Get after cancel: %v %+v", err, got)
	}

	// Foreground responses cannot be cancelled.
	fg, err := client.Responses.New(ctx, sdkParams("sdk-cancel", false, map[string]string{KeyTokens: "2"}))
	if err != nil || fg.Status != "completed" {
		t.Fatalf("New: %v %+v", err, fg)
	}
	_, err = client.Responses.Cancel(ctx, fg.ID)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Message != "Cannot cancel a synchronous response." {
		t.Fatalf("Cancel of a foreground response: %v", err)
	}
	_, err = client.Responses.Cancel(ctx, "resp_missing")
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("Cancel of an unknown response: %v", err)
	}
}

func TestSDKErrors(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)

	wrong, noRetry, oneRetry := sdkClient(srv, c, "wrong", 0), sdkClient(srv, c, testKey, 0), sdkClient(srv, c, testKey, 1)
	_, err := wrong.Responses.New(ctx, sdkParams("sdk-err", true, nil))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || apiErr.Message == "" {
		t.Fatalf("bad key: %v", err)
	}

	params := sdkParams("sdk-429", true, map[string]string{KeyCreateStatus: "429"})
	stream := noRetry.Responses.NewStreaming(ctx, params)
	if stream.Next() || !errors.As(stream.Err(), &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("429: %v", stream.Err())
	}
	// The SDK retries a create blindly (honouring Retry-After: 1): each
	// attempt reaches "Foundry", which is how duplicate background runs start.
	_, err = oneRetry.Responses.New(ctx, params)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("429 with a retry: %v", err)
	}
	if n := len(srv.CreateRequests("sdk-429")); n != 3 {
		t.Fatalf("%d create requests received, want 1 + 2 (one retry)", n)
	}

	bad := sdkParams("sdk-err", true, nil)
	bad.Store = openai.Bool(false)
	_, err = noRetry.Responses.New(ctx, bad)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "background" {
		t.Fatalf("background without store: %v", err)
	}
}

func TestSDKAgentReference(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	params := responses.ResponseNewParams{
		Input:    responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Metadata: shared.Metadata{"run_id": "sdk-agent", KeyTokens: "3"},
	}
	params.SetExtraFields(map[string]any{"agent_reference": map[string]string{"type": "agent_reference", "name": "helper"}})
	client := sdkClient(srv, c, testKey, 0)
	got, err := client.Responses.New(testCtx(t), params)
	if err != nil || got.Status != "completed" || !strings.Contains(got.RawJSON(), `"agent_reference":{"name":"helper","type":"agent_reference"}`) {
		t.Fatalf("agent_reference: %v %s", err, got.RawJSON())
	}
	body := string(srv.CreateRequests("sdk-agent")[0])
	if strings.Contains(body, `"model"`) {
		t.Fatalf("the SDK sent a model: %s", body)
	}
}
