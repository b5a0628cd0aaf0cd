package consumer_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/events"
	"github.com/foundryq/foundryq/foundry"
	"github.com/foundryq/foundryq/internal/testkit"
)

// traced is a test world whose worker, client and Foundry transport are
// observed: spans go to an in-memory exporter, and the traceparent of every
// Foundry request is recorded.
type traced struct {
	*env
	exp    *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	client *events.Client // the client whose spans are exported
	http   *headerRecorder
}

func setupTraced(t *testing.T) *traced { return setupTracedWorkers(t, "traced") }

// setupTracedWorkers starts one traced worker per id.
func setupTracedWorkers(t *testing.T, ids ...string) *traced {
	t.Helper()
	e := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rec := &headerRecorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(rec.next.CloseIdleConnections)
	up, err := foundry.New(foundry.Config{BaseURL: e.emu.BaseURL(), APIKey: "test-key", HTTPClient: &http.Client{Transport: rec}})
	if err != nil {
		t.Fatal(err)
	}
	e.up = up
	for _, id := range ids {
		e.startWorker(consumer.Config{WorkerID: id, TracerProvider: tp})
	}
	c, err := events.NewClient(e.nc, events.ClientConfig{TracerProvider: tp, CancelTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &traced{env: e, exp: exp, tp: tp, client: c, http: rec}
}

// headerRecorder records the method, path and traceparent of each request.
type headerRecorder struct {
	next *http.Transport
	mu   sync.Mutex
	seen []string // "METHOD PATH traceparent"
}

func (h *headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.seen = append(h.seen, req.Method+" "+req.URL.Path+" "+req.Header.Get("traceparent"))
	h.mu.Unlock()
	return h.next.RoundTrip(req)
}

func (h *headerRecorder) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// span waits for an ended span named name that matches ok, and returns it.
func (tr *traced) span(name string, ok func(tracetest.SpanStub) bool) tracetest.SpanStub {
	tr.t.Helper()
	var found tracetest.SpanStub
	testkit.Eventually(tr.t, 20*time.Second, "span "+name, func() bool {
		for _, s := range tr.exp.GetSpans() {
			if s.Name == name && (ok == nil || ok(s)) {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

func (tr *traced) spanNames() []string {
	var names []string
	for _, s := range tr.exp.GetSpans() {
		names = append(names, s.Name+"("+s.SpanContext.SpanID().String()+"<-"+s.Parent.SpanID().String()+")")
	}
	return names
}

func childOf(parent tracetest.SpanStub) func(tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool { return s.Parent.SpanID() == parent.SpanContext.SpanID() }
}

// TestTraceSpansSubmitWorkerAndFoundry follows one run's trace: the test's
// span, Submit's producer span, the worker's run span (continued from the
// request's headers), the Foundry create under it with its traceparent on
// the HTTP request, and the trace context on the stored events.
func TestTraceSpansSubmitWorkerAndFoundry(t *testing.T) {
	t.Parallel()
	tr := setupTraced(t)
	ctx, root := tr.tp.Tracer("test").Start(testCtx(t), "test request")
	if _, err := tr.client.Submit(ctx, request("traced-1", nil)); err != nil {
		t.Fatal(err)
	}
	root.End()
	last := checkWellFormed(t, tr.collect("traced-1", 20*time.Second))
	if last.Type != events.TypeRunCompleted {
		t.Fatalf("run ended %s", last.Type)
	}
	traceID := root.SpanContext().TraceID()

	submit := tr.span("foundryq submit", nil)
	run := tr.span("foundryq run", nil)
	create := tr.span("foundry create", childOf(run))
	rootStub := tr.span("test request", nil)
	for _, s := range []tracetest.SpanStub{submit, run, create} {
		if s.SpanContext.TraceID() != traceID {
			t.Fatalf("span %s in trace %s, want the test's trace %s (spans %v)", s.Name, s.SpanContext.TraceID(), traceID, tr.spanNames())
		}
	}
	switch {
	case submit.Parent.SpanID() != rootStub.SpanContext.SpanID():
		t.Fatalf("submit span's parent %s, want the test's span", submit.Parent.SpanID())
	case run.Parent.SpanID() != submit.SpanContext.SpanID() || !run.Parent.IsRemote():
		t.Fatalf("run span's parent %s (remote %v), want the submit span %s from the request's headers",
			run.Parent.SpanID(), run.Parent.IsRemote(), submit.SpanContext.SpanID())
	case run.SpanKind != trace.SpanKindConsumer || create.SpanKind != trace.SpanKindClient || submit.SpanKind != trace.SpanKindProducer:
		t.Fatalf("span kinds: submit %s, run %s, create %s", submit.SpanKind, run.SpanKind, create.SpanKind)
	}
	if !hasAttr(run, "foundryq.run_id", "traced-1") || !hasAttr(run, "foundry.response_id", last.ResponseID) ||
		!hasAttr(run, "foundryq.outcome", string(events.TypeRunCompleted)) {
		t.Fatalf("run span attributes %v", run.Attributes)
	}

	// The create went out with the create span's traceparent.
	want := "00-" + traceID.String() + "-" + create.SpanContext.SpanID().String() + "-01"
	var sawCreate bool
	for _, r := range tr.http.requests() {
		if strings.HasPrefix(r, "POST ") && strings.HasSuffix(r, "/responses "+want) {
			sawCreate = true
		}
	}
	if !sawCreate {
		t.Fatalf("no create request carried traceparent %s; requests: %v", want, tr.http.requests())
	}

	// Stored events carry the run's trace context.
	stream, err := tr.js.Stream(ctx, tr.client.Names().EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, tr.client.Names().EventSubject("traced-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := msg.Header.Get("traceparent"), "00-"+traceID.String()+"-"+run.SpanContext.SpanID().String()+"-01"; got != want {
		t.Fatalf("terminal event's traceparent %q, want the run span's %q", got, want)
	}
}

// TestCancelSpanLinksToTheRun: a cancel sent outside the run's trace has
// its own trace (client span, the worker's answer under it) and links to
// the run's trace; the owner's cancel span sits under the run span, links
// to the answer, and its Foundry cancel call is its child. Two workers: the
// one answering may be the owner or not (its notice to the owner carries
// the answer's trace context); either way the answer links to the run span.
func TestCancelSpanLinksToTheRun(t *testing.T) {
	t.Parallel()
	tr := setupTracedWorkers(t, "ta", "tb")
	ctx := testCtx(t)
	if _, err := tr.client.Submit(ctx, slow("traced-c")); err != nil {
		t.Fatal(err)
	}
	tr.waitEvent("traced-c", events.TypeTextDelta, 20*time.Second)
	reply, err := tr.client.Cancel(ctx, "traced-c", "trace test")
	if err != nil || reply.Result != events.CancelCancelling {
		t.Fatalf("cancel: %+v, %v", reply, err)
	}
	if last := checkWellFormed(t, tr.collect("traced-c", 20*time.Second)); last.Type != events.TypeRunCancelled {
		t.Fatalf("run ended %s", last.Type)
	}

	run := tr.span("foundryq run", nil)
	cancel := tr.span("foundryq cancel", nil)
	answer := tr.span("foundryq cancel answer", childOf(cancel))
	owner := tr.span("foundryq run cancel", childOf(run))
	upstream := tr.span("foundry cancel", childOf(owner))
	if cancel.SpanContext.TraceID() == run.SpanContext.TraceID() {
		t.Fatal("the cancel was sent outside the run's trace but shares its trace id")
	}
	if answer.SpanContext.TraceID() != cancel.SpanContext.TraceID() || !answer.Parent.IsRemote() || answer.SpanKind != trace.SpanKindServer {
		t.Fatalf("answer span %+v does not continue the cancel request's trace", answer.SpanContext)
	}
	// Whoever answers, and whether or not the run has ended by then (the
	// owner also hears the cancel from the stored record), the answer links
	// to the run span: the owner has it, and the run's stored events carry it.
	t.Logf("cancel answered by the owner: %v", hasAttr(answer, "foundryq.worker", attrOf(run, "foundryq.worker")))
	if !linksTo(answer, run.SpanContext) {
		t.Fatalf("answer span links %v, want a link to the run span %s; spans %v", answer.Links, run.SpanContext.SpanID(), tr.spanNames())
	}
	// The owner hears the cancel first either from the answer (a notice)
	// or from the stored record the client published under its span.
	if !linksTo(owner, answer.SpanContext) && !linksTo(owner, cancel.SpanContext) {
		t.Fatalf("owner's cancel span links %v, want a link to the answer span %s or the cancel's span %s",
			owner.Links, answer.SpanContext.SpanID(), cancel.SpanContext.SpanID())
	}
	if upstream.SpanContext.TraceID() != run.SpanContext.TraceID() || upstream.SpanKind != trace.SpanKindClient {
		t.Fatalf("Foundry cancel span %+v is not in the run's trace", upstream.SpanContext)
	}
}

func linksTo(s tracetest.SpanStub, sc trace.SpanContext) bool {
	for _, l := range s.Links {
		if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
			return true
		}
	}
	return false
}

func attrOf(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func hasAttr(s tracetest.SpanStub, key, value string) bool {
	for _, a := range s.Attributes {
		if string(a.Key) == key && a.Value.Emit() == value {
			return true
		}
	}
	return false
}
