package foundrytest_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// A background streaming response driven through openai-go, scripted with
// metadata: one MCP tool call, then five tokens.
func ExampleNewServer() {
	srv := foundrytest.NewServer(foundrytest.Config{APIKey: "key"})
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	client := openai.NewClient(
		option.WithBaseURL(srv.BaseURL()),
		option.WithAPIKey("key"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: tr}),
	)
	stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model:      "gpt-4o-mini",
		Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")},
		Background: openai.Bool(true),
		Store:      openai.Bool(true),
		Metadata:   shared.Metadata{"run_id": "example", "emu_tokens": "5", "emu_tool_ms": "10"},
	})
	text := ""
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.mcp_call.completed", "response.queued":
			fmt.Println(ev.SequenceNumber, ev.Type)
		case "response.output_text.delta":
			text += ev.Delta
		case "response.completed":
			fmt.Println(ev.SequenceNumber, ev.Type, ev.Response.Usage.OutputTokens, "tokens")
		}
	}
	if err := stream.Err(); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("%q\n", text)
	fmt.Println(srv.Stats().ResponsesByRun["example"], "response for run example")
	// Output:
	// 1 response.queued
	// 7 response.mcp_call.completed
	// 19 response.completed 5 tokens
	// "One keeps the again river"
	// 1 response for run example
}

// NewHandler serves the emulator on any listener, as `foundryq emulator`
// does; Close stops the generations, then the server is shut down.
func ExampleNewHandler() {
	h := foundrytest.NewHandler(foundrytest.Config{})
	srv := &http.Server{Addr: "127.0.0.1:8089", Handler: h}
	_ = srv // go srv.ListenAndServe(); on interrupt: h.Close(); srv.Shutdown(ctx)
	h.Close()
	fmt.Println(h.Stats().ActiveGenerations)
	// Output: 0
}
