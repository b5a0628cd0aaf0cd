package foundry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/foundry/foundrytest"
)

// Start a background response, relay its tokens, and confirm the final state.
// The emulator stands in for Azure; against Azure, BaseURL would be
// https://RES.openai.azure.com/openai/v1/ and APIKey empty for Entra ID.
func Example() {
	emu := foundrytest.NewServer(foundrytest.Config{APIKey: "secret"})
	defer emu.Close()

	client, err := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "secret"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	stream, err := client.Create(ctx, foundry.CreateRequest{
		Model:    "gpt-4o-mini",
		Input:    json.RawMessage(`"Write a haiku about queues."`),
		Metadata: map[string]string{"run_id": "example-1", "emu_tokens": "5"},
	})
	if err != nil {
		panic(err)
	}
	defer stream.Close()

	var text strings.Builder
	deltas := 0
	for stream.Next() {
		ev := stream.Event()
		switch ev.Type {
		case foundry.EventOutputTextDelta:
			deltas++
			text.WriteString(ev.Delta)
		case foundry.EventCompleted:
			fmt.Println("status:", ev.Response.Status, "output tokens:", ev.Response.Usage.OutputTokens)
		}
	}
	if err := stream.Err(); errors.Is(err, foundry.ErrStreamTruncated) {
		last, _ := stream.LastSeq()
		fmt.Println("resume with client.Resume(ctx, id,", last, ")")
	} else if err != nil {
		panic(err)
	}
	fmt.Println("deltas:", deltas)

	stored, err := client.Get(ctx, stream.ResponseID())
	if err != nil {
		panic(err)
	}
	fmt.Println("stored text matches:", stored.OutputText == text.String())
	// Output:
	// status: completed output tokens: 5
	// deltas: 5
	// stored text matches: true
}

// Resume a stream that broke, from the last sequence number seen.
func ExampleClient_Resume() {
	emu := foundrytest.NewServer(foundrytest.Config{})
	defer emu.Close()
	client, _ := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "unused"})
	ctx := context.Background()

	// emu_drop_after cuts the connection after 6 events.
	stream, err := client.Create(ctx, foundry.CreateRequest{
		Model:    "gpt-4o-mini",
		Input:    json.RawMessage(`"hello"`),
		Metadata: map[string]string{"emu_tokens": "10", "emu_drop_after": "6"},
	})
	if err != nil {
		panic(err)
	}
	for stream.Next() {
	}
	last, _ := stream.LastSeq()
	fmt.Println("truncated:", errors.Is(stream.Err(), foundry.ErrStreamTruncated), "after", last)

	resumed, err := client.Resume(ctx, stream.ResponseID(), last)
	if err != nil {
		panic(err)
	}
	defer resumed.Close()
	first := true
	for resumed.Next() {
		if first {
			fmt.Println("resumed at", resumed.Event().SequenceNumber)
			first = false
		}
	}
	fmt.Println("terminal:", resumed.Terminal(), "err:", resumed.Err())
	// Output:
	// truncated: true after 5
	// resumed at 6
	// terminal: true err: <nil>
}

// Cancel a response on the server; dropping the connection would not stop it.
func ExampleClient_Cancel() {
	emu := foundrytest.NewServer(foundrytest.Config{})
	defer emu.Close()
	client, _ := foundry.New(foundry.Config{BaseURL: emu.BaseURL(), APIKey: "unused"})
	ctx := context.Background()

	stream, err := client.Create(ctx, foundry.CreateRequest{
		Model:    "gpt-4o-mini",
		Input:    json.RawMessage(`"a long story"`),
		Metadata: map[string]string{"emu_tokens": "10000", "emu_token_ms": "5"},
	})
	if err != nil {
		panic(err)
	}
	defer stream.Close()
	for stream.Next() {
		if stream.Event().Type == foundry.EventOutputTextDelta {
			break
		}
	}
	resp, err := client.Cancel(ctx, stream.ResponseID())
	if err != nil {
		panic(err)
	}
	fmt.Println("status:", resp.Status)
	// Output:
	// status: cancelled
}
