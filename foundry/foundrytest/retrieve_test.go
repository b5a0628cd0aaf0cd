package foundrytest

import (
	"bytes"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foundryq/foundryq/internal/testkit"
)

// fakeClock is a Config.Clock that tests move forward.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

func resume(t *testing.T, srv *Server, c *http.Client, id string, after int) *http.Response {
	t.Helper()
	q := "?stream=true"
	if after >= 0 {
		q += fmt.Sprintf("&starting_after=%d", after)
	}
	return do(t, testCtx(t), c, "GET", srv.BaseURL()+"responses/"+id+q, nil)
}

func TestResumeReplaysExactlyTheEventsAfterN(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	evs, err := createStream(t, srv, c, createBody("replay", true, true, map[string]string{KeyTokens: "20", KeyToolMS: "0"}))
	if err != nil {
		t.Fatal(err)
	}
	id := evs[0].Response.ID
	for _, n := range []int{-1, 0, 1, 5, 17, len(evs) - 2, len(evs) - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			got, err := readAll(t, resume(t, srv, c, id, n).Body)
			if err != nil {
				t.Fatal(err)
			}
			want := evs[n+1:]
			if len(got) != len(want) {
				t.Fatalf("%d events after %d, want %d", len(got), n, len(want))
			}
			for i := range got {
				if !bytes.Equal(got[i].Raw, want[i].Raw) {
					t.Fatalf("event %d differs:\n got %s\nwant %s", i, got[i].Raw, want[i].Raw)
				}
			}
		})
	}
}

func TestResumeFollowsLive(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	resp := do(t, testCtx(t), c, "POST", srv.BaseURL()+"responses",
		createBody("live", true, true, map[string]string{KeyTokens: "60", KeyTokenMS: "3"}))
	s := newSSEReader(resp.Body)
	var first []wireEvent
	for len(first) < 10 {
		ev, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, ev)
	}
	resp.Body.Close()
	id := first[0].Response.ID
	rest, err := readAll(t, resume(t, srv, c, id, 9).Body)
	if err != nil {
		t.Fatal(err)
	}
	checkSeq(t, rest, 10)
	all := append(first, rest...)
	last := all[len(all)-1]
	if last.Type != evCompleted || deltas(all) != last.Response.text() {
		t.Fatalf("live resume: last %s, text %q vs %q", last.Type, deltas(all), last.Response.text())
	}
}

func TestResumeRefusals(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	srv, c := setup(t, Config{Clock: clock.Now, ResumeWindow: 90 * time.Second})
	ctx := testCtx(t)
	bg, err := createStream(t, srv, c, createBody("refuse", true, true, map[string]string{KeyTokens: "2"}))
	if err != nil {
		t.Fatal(err)
	}
	fg, err := createStream(t, srv, c, createBody("refuse", false, true, map[string]string{KeyTokens: "2"}))
	if err != nil {
		t.Fatal(err)
	}
	var poll wireResponse
	readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", createBody("refuse", true, false, nil)), http.StatusOK, &poll)

	for _, tc := range []struct {
		name, id, query, msg string
		status               int
	}{
		{"not background", fg[0].Response.ID, "?stream=true", "This response cannot be streamed because it was not created with background=true.", 400},
		{"not streamed", poll.ID, "?stream=true", "This response cannot be streamed because it was not created with stream=true.", 400},
		{"unknown id", "resp_nope", "?stream=true", "Response with id 'resp_nope' not found.", 404},
		{"bad stream", bg[0].Response.ID, "?stream=maybe", `Invalid value for 'stream': expected a boolean, but got "maybe" instead.`, 400},
		{"bad starting_after", bg[0].Response.ID, "?stream=true&starting_after=x", `Invalid value for 'starting_after': expected an integer >= -1, but got "x" instead.`, 400},
	} {
		e := apiErr(t, do(t, ctx, c, "GET", srv.BaseURL()+"responses/"+tc.id+tc.query, nil), tc.status)
		if e.Message != tc.msg {
			t.Errorf("%s: message %q, want %q", tc.name, e.Message, tc.msg)
		}
	}

	// Inside the window the background response streams; past it, 400, but
	// polling still works.
	if _, err := readAll(t, resume(t, srv, c, bg[0].Response.ID, 3).Body); err != nil {
		t.Fatal(err)
	}
	clock.Advance(91 * time.Second)
	e := apiErr(t, resume(t, srv, c, bg[0].Response.ID, 3), 400)
	if want := "This response can no longer be streamed because it is more than 90 seconds old."; e.Message != want {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
	if got := getResponse(t, ctx, c, srv, bg[0].Response.ID); got.Status != statusCompleted {
		t.Fatalf("GET after the window: %+v", got)
	}
}

func TestResumeWindowDefaultWording(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	srv, c := setup(t, Config{Clock: clock.Now})
	evs, err := createStream(t, srv, c, createBody("window", true, true, nil))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(5*time.Minute + time.Second)
	e := apiErr(t, resume(t, srv, c, evs[0].Response.ID, 0), 400)
	if want := "This response can no longer be streamed because it is more than 5 minutes old."; e.Message != want {
		t.Fatalf("message %q, want %q", e.Message, want)
	}
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		5 * time.Minute: "5 minutes", time.Minute: "1 minute", 90 * time.Second: "90 seconds",
		time.Second: "1 second", 2 * time.Hour: "2 hours", 1500 * time.Millisecond: "1.5s",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	srv, c := setup(t, Config{})
	ctx := testCtx(t)
	var r wireResponse
	readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses",
		createBody("del", true, false, map[string]string{KeyTokens: "100000", KeyTokenMS: "10"})), http.StatusOK, &r)
	var del struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}
	readJSON(t, do(t, ctx, c, "DELETE", srv.BaseURL()+"responses/"+r.ID, nil), http.StatusOK, &del)
	if del.ID != r.ID || del.Object != "response" || !del.Deleted {
		t.Fatalf("delete: %+v", del)
	}
	apiErr(t, do(t, ctx, c, "GET", srv.BaseURL()+"responses/"+r.ID, nil), http.StatusNotFound)
	apiErr(t, do(t, ctx, c, "DELETE", srv.BaseURL()+"responses/"+r.ID, nil), http.StatusNotFound)
	testkit.Eventually(t, 15*time.Second, "the generation to stop", func() bool { return srv.Stats().ActiveGenerations == 0 })
	if _, ok := srv.Stats().Statuses[r.ID]; ok {
		t.Fatal("a deleted response is still in Stats.Statuses")
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	srv, c := setup(t, Config{Clock: clock.Now, Retention: time.Minute})
	ctx := testCtx(t)
	var old wireResponse
	readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", createBody("ret", false, false, nil)), http.StatusOK, &old)
	clock.Advance(2 * time.Minute)
	var fresh wireResponse
	readJSON(t, do(t, ctx, c, "POST", srv.BaseURL()+"responses", createBody("ret", false, false, nil)), http.StatusOK, &fresh)
	apiErr(t, do(t, ctx, c, "GET", srv.BaseURL()+"responses/"+old.ID, nil), http.StatusNotFound)
	getResponse(t, ctx, c, srv, fresh.ID)
}
