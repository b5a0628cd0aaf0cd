package gateway_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/gateway"
	"github.com/foundryq/foundryq/tools"
)

// chromium returns the path of a Chromium to drive, or skips the test
// (fails it when FOUNDRYQ_REQUIRE_CHROMIUM=1, as in CI).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no Chromium on PATH (Debian: apt-get install -y chromium): the browser test of the console is skipped"
	if os.Getenv("FOUNDRYQ_REQUIRE_CHROMIUM") == "1" {
		t.Fatal(msg + " but FOUNDRYQ_REQUIRE_CHROMIUM=1")
	}
	t.Skip(msg)
	return ""
}

// browser is a headless Chromium a test drives, within 2 minutes; it is
// closed when the test ends, before the test's servers stop.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// newBrowser starts Chromium exe with the console tests' options, and
// extra ones (a window size).
func newBrowser(t *testing.T, exe string, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	actx, acancel := chromedp.NewExecAllocator(ctx, append(opts, extra...)...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel(); cancel() })
	return &browser{t: t, ctx: bctx}
}

// do runs actions in the page, failing the test with what on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// get reads a value from the page.
func (b *browser) get(what string, a chromedp.Action[string]) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// waitJS polls a JavaScript condition in the page, for up to a minute.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(60*time.Second), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		b.t.Fatalf("browser: waiting for %s: %v", what, err)
	}
}

// The console end to end in headless Chromium: sign in with a token, see
// the runs, start a run with a tool call, watch its text stream in, press
// Stop, and see it cancelled with Foundry's status and usage, while the
// emulator generated no token after the cancel.
//
// FOUNDRYQ_UPDATE_SCREENSHOT=1 writes the page to testdata/console.png
// (the picture in docs/gateway.md).
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	e := setup(t, 1)
	nc, err := e.ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	const token = "console-test-token"
	g := startGateway(t, gateway.Config{Tenants: []gateway.Tenant{{Name: "ops", Conn: nc, TokenSHA256: []string{gateway.HashToken(token)}}}}, nil)
	auth := []string{"Authorization", "Bearer " + token}
	// A run id as people write them, and one as the gateway makes them.
	const typicalID = "run-20261203-abc123"
	var madeID string
	for i, input := range []string{"Summarise the ticket", "Draft a reply"} {
		req := runRequest(nil)
		req["input"] = input
		if i == 0 {
			req["run_id"] = typicalID
		}
		id := g.create(t, req, auth...).RunID
		e.watchAll(id)
		madeID = id
	}

	b := newBrowser(t, exe, chromedp.WindowSize(1360, 860))
	run, get, waitJS := b.do, b.get, b.waitJS

	run("open the console", chromedp.Navigate(g.url+"/"), chromedp.WaitVisible(chromedp.CSS("#auth")))
	run("sign in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#save-token")))
	waitJS("the run list", `document.querySelectorAll("#runs tbody tr").length >= 2`)
	for _, id := range []string{typicalID, madeID} {
		// The whole id shows, on one line, inside the list: not cut off.
		cell := `[...document.querySelectorAll("#runs tbody tr")].find(r => r.dataset.runId === ` + jsString(id) + `).cells[0]`
		waitJS("the full run id "+id+" in the list", `(() => { const td = `+cell+`;
			const r = document.createRange(); r.selectNodeContents(td);
			return td.textContent === `+jsString(id)+` && td.title === `+jsString(id)+` && td.scrollWidth <= td.clientWidth &&
				r.getClientRects().length === 1 && r.getBoundingClientRect().right <= td.closest("section").getBoundingClientRect().right; })()`)
	}
	// The examples of Metadata and Tools are placeholders, never values
	// that a run would be sent with, and read as examples.
	for _, field := range []string{"#metadata", "#tools"} {
		waitJS(field+" empty, with an example as its placeholder", `(() => { const f = document.querySelector(`+jsString(field)+`);
			return f.value === "" && f.placeholder.startsWith("e.g. ") &&
				getComputedStyle(f, "::placeholder").fontStyle === "italic"; })()`)
	}

	const tools = `[{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","require_approval":"never"}]`
	run("start a run",
		chromedp.SetValue(chromedp.CSS("#input"), "Tell me a story about a queue that learned to stop."),
		chromedp.SetValue(chromedp.CSS("#metadata"), "emu_tokens=100000\nemu_token_ms=30\nemu_tool_ms=300"),
		chromedp.SetValue(chromedp.CSS("#tools"), tools),
		chromedp.Click(chromedp.CSS("#start")))
	waitJS("the tool call shown inline", `document.querySelector("#run-text .tool.completed") !== null`)
	mcpChip := get("read the MCP tool call", chromedp.Evaluate[string](`document.querySelector("#run-text .tool.completed").textContent`))
	for _, want := range []string{"crm/", "mcp", "completed"} {
		if !strings.Contains(mcpChip, want) {
			t.Errorf("the MCP tool call shows %q, without %q", mcpChip, want)
		}
	}
	waitJS("text streaming in", `document.querySelector("#run-text").textContent.length > 400`)
	runID := get("read the run id", chromedp.Text(chromedp.CSS("#run-id")))

	run("press Stop", chromedp.Click(chromedp.CSS("#stop")))
	waitJS("the run cancelled", `document.querySelector("#run-status").textContent === "cancelled"`)
	waitJS("the list updated", `[...document.querySelectorAll("#runs tbody tr")].some(r => r.dataset.runId === `+jsString(runID)+` && r.textContent.includes("cancelled"))`)
	summary := get("read the summary", chromedp.Text(chromedp.CSS("#run-summary")))
	pageText := get("read the text", chromedp.Evaluate[string](`document.querySelector("#run-text").textContent`))
	for _, want := range []string{"cancelled (requested)", "Foundry status", "usage", "output"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary %q lacks %q", summary, want)
		}
	}

	evs := e.watchAll(runID)
	end := evs[len(evs)-1]
	if end.UpstreamStatus != "cancelled" || end.Usage == nil {
		t.Fatalf("terminal event %+v", end)
	}
	if !strings.HasSuffix(pageText, text(evs)) || len(text(evs)) < 200 {
		t.Fatalf("the page shows %q; the run's text is %q", pageText, text(evs))
	}
	st := e.emu.Stats()
	if st.TokensAfterCancel != 0 || st.ToolCallsCompletedAfterCancel != 0 {
		t.Fatalf("emulator: %d tokens and %d tool calls after the cancel", st.TokensAfterCancel, st.ToolCallsCompletedAfterCancel)
	}
	if recs := e.emu.Records(runID); len(recs) != 1 || st.Statuses[recs[0].ID] != "cancelled" {
		t.Fatalf("emulator response of %s: %+v", runID, st.Statuses)
	}

	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("browser: screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatal("the screenshot is not a PNG")
	}
	if os.Getenv("FOUNDRYQ_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("testdata", "console.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkFunctionToolShown(t, nc, b)
}

// checkFunctionToolShown starts a run in the console whose model calls a
// function tool served over NATS (tools.Serve on nc), and checks its call
// inline: name, type and status while it runs, then its output once it
// answers, as text (HTML in it is not parsed) and visibly cut.
func checkFunctionToolShown(t *testing.T, nc *nats.Conn, b *browser) {
	t.Helper()
	run, get, waitJS := b.do, b.get, b.waitJS
	// Longer than the 4 KiB the worker's event carries: cut twice.
	output := `<img src=x onerror="window.pwned=1"><b>21°C</b> ` + strings.Repeat("sunny ", 800)
	release := make(chan struct{})
	svc, err := tools.Serve(nc, "get_weather", func(ctx context.Context, _ tools.Call) (string, error) {
		select {
		case <-release:
			return output, nil
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	run("start a run whose model calls a served function tool",
		chromedp.SetValue(chromedp.CSS("#input"), "What is the weather in Paris?"),
		chromedp.SetValue(chromedp.CSS("#metadata"), "emu_tokens=20\nemu_tool_ms=1"),
		chromedp.SetValue(chromedp.CSS("#tools"), `[{"type":"function","name":"get_weather"}]`),
		chromedp.Click(chromedp.CSS("#start")))
	const chip = `document.querySelector("#run-text .tool[data-type=function]")`
	waitJS("the function tool call running", chip+` !== null && `+chip+`.classList.contains("started")`)
	started := get("read the running call", chromedp.Evaluate[string](chip+`.textContent`))
	for _, want := range []string{"get_weather", "function", "started"} {
		if !strings.Contains(started, want) {
			t.Errorf("the running call shows %q, without %q", started, want)
		}
	}
	close(release)
	waitJS("the function tool's output", chip+`.classList.contains("completed") && `+chip+`.querySelector(".tool-output") !== null`)
	waitJS("the run completed", `document.querySelector("#run-status").textContent === "completed"`)
	shown := get("read the output shown", chromedp.Evaluate[string](chip+`.querySelector(".tool-output").textContent`))
	head := get("read the call", chromedp.Evaluate[string](chip+`.querySelector(".tool-head").textContent`))
	for _, want := range []string{"get_weather", "function", "completed"} {
		if !strings.Contains(head, want) {
			t.Errorf("the answered call shows %q, without %q", head, want)
		}
	}
	if !strings.Contains(shown, `<img src=x onerror="window.pwned=1"><b>21°C</b> sunny`) || len(shown) >= len(output) || !strings.Contains(shown, "[truncated: 160 of more than 40") {
		t.Errorf("the output shows as %q: want its beginning as text, visibly cut", shown)
	}
	waitJS("no element made of the output", chip+`.querySelector("img, b") === null && window.pwned === undefined`)
}

// A run that asks, answered in the console: its approval request shows
// with Approve and Deny; Approve sends the answer, and the run goes on to
// run the tool call and complete, one upstream response per step.
func TestConsoleApprovesInBrowser(t *testing.T) {
	exe := chromium(t)
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	b := newBrowser(t, exe)
	do, waitJS := b.do, b.waitJS
	const tools = `[{"type":"mcp","server_label":"crm","server_url":"https://crm.example.com/mcp","allowed_tools":["lookup"]}]`
	do("open the console and start a run that asks",
		chromedp.Navigate(g.url+"/"), chromedp.WaitVisible(chromedp.CSS("#new-run")),
		chromedp.SetValue(chromedp.CSS("#input"), "Look the customer up."),
		chromedp.SetValue(chromedp.CSS("#metadata"), "emu_tokens=20\nemu_tool_ms=50"),
		chromedp.SetValue(chromedp.CSS("#tools"), tools),
		chromedp.Click(chromedp.CSS("#start")))
	waitJS("the approval request", `document.querySelector("#run-asked .asked button.approve") !== null && document.querySelector("#run-status").textContent === "waiting"`)
	if asked := b.get("read the request", chromedp.Text(chromedp.CSS("#run-asked"))); !strings.Contains(asked, "lookup on crm") {
		t.Fatalf("the request shows %q", asked)
	}
	runID := b.get("read the run id", chromedp.Text(chromedp.CSS("#run-id")))
	do("press Approve", chromedp.Click(chromedp.CSS("#run-asked button.approve")))
	waitJS("the run completed", `document.querySelector("#run-status").textContent === "completed"`)
	waitJS("the answer marked", `document.querySelector("#run-asked .note").textContent === "approved"`)
	evs := e.watchAll(runID)
	if end := evs[len(evs)-1]; end.Type != events.TypeRunCompleted || len(e.emu.Records(runID)) != 2 || e.emu.Stats().ToolCallsStarted != 1 {
		t.Fatalf("run %s ended %s with %d responses", runID, end.Type, len(e.emu.Records(runID)))
	}
}

// A run the model refuses, in the console: the refusal shows as the run's
// text (as text: nothing in it is parsed), marked as a refusal, and the
// summary says the model refused.
func TestConsoleShowsRefusalInBrowser(t *testing.T) {
	exe := chromium(t)
	e := setup(t, 1)
	g := e.gateway(gateway.Config{})
	b := newBrowser(t, exe)
	get := func(what, expr string) string { return b.get(what, chromedp.Evaluate[string](expr)) }
	b.do("start a run the model refuses", chromedp.Navigate(g.url+"/"), chromedp.WaitVisible(chromedp.CSS("#new-run")),
		chromedp.SetValue(chromedp.CSS("#input"), "Tell me something you will not."),
		chromedp.SetValue(chromedp.CSS("#metadata"), "emu_refusal=1"),
		chromedp.Click(chromedp.CSS("#start")))
	b.waitJS("the run to complete", `document.querySelector("#run-status").textContent === "completed"`)
	runID := get("read the run id", `document.querySelector("#run-id").textContent`)
	evs := e.watchAll(runID)
	var refusal strings.Builder
	for _, ev := range evs {
		if ev.Type == events.TypeRefusalDelta {
			refusal.WriteString(ev.Text)
		}
	}
	if end := evs[len(evs)-1]; end.Type != events.TypeRunCompleted || !end.Refusal || refusal.Len() == 0 || text(evs) != "" {
		t.Fatalf("run %s ended %+v, refusal %q, text %q", runID, end, refusal.String(), text(evs))
	}
	shown := get("read the refusal shown", `(() => { const r = document.querySelectorAll("#run-text .refusal");
		return r.length === 1 && r[0].children.length === 0 ? r[0].textContent : "<" + r.length + " refusal elements, or markup in one>"; })()`)
	if shown != refusal.String() {
		t.Errorf("the refusal shows as %q, want %q", shown, refusal.String())
	}
	if all := get("read the run's text", `document.querySelector("#run-text").textContent`); all != refusal.String() {
		t.Errorf("the run's text is %q: want only the refusal", all)
	}
	if mark := get("read the refusal's mark", `getComputedStyle(document.querySelector("#run-text .refusal"), "::before").content`); !strings.Contains(mark, "refused") {
		t.Errorf("the refusal is marked %s, want a visible \"refused\"", mark)
	}
	if summary := get("read the summary", `document.querySelector("#run-summary").textContent`); !strings.Contains(summary, "the model refused") {
		t.Errorf("the summary %q does not say the model refused", summary)
	}
}

func jsString(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

// A queued run in the console shows where it waits: its lane and its
// place there, as a worker tells it, until a worker takes it.
func TestConsoleShowsQueuePositionInBrowser(t *testing.T) {
	exe := chromium(t)
	e := setup(t, 0)
	e.startWorker(consumer.Config{Concurrency: 1})
	g := e.gateway(gateway.Config{})
	unblock := g.block(t)
	g.createIDs(t, "first", "second")
	b := newBrowser(t, exe)
	b.do("open the queued run", chromedp.Navigate(g.url+"/#run=second"), chromedp.WaitVisible(chromedp.CSS("#run")))
	b.waitJS("its place in the queue", `document.querySelector("#run-meta").textContent === "waiting in lane normal/default: number 2 of 2"`)
	unblock()
	b.waitJS("the run to complete", `document.querySelector("#run-status").textContent === "completed"`)
}
