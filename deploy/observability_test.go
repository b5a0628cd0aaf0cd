package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/foundryq/foundryq/consumer"
	"github.com/foundryq/foundryq/devstack"
	"github.com/foundryq/foundryq/events"
)

// alertRules is the part of a Prometheus rule file the test reads.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// dashboardPanel is the part of a Grafana panel the test reads.
type dashboardPanel struct {
	ID      int              `json:"id"`
	Type    string           `json:"type"`
	Title   string           `json:"title"`
	Panels  []dashboardPanel `json:"panels"` // a row's panels
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

// metricName finds foundryq's metric names in a PromQL expression: every
// one of them starts with foundryq_, and no label or function does.
var metricName = regexp.MustCompile(`\bfoundryq_[a-zA-Z0-9_]+`)

// byClause finds the labels of the aggregations' by (...) clauses.
var byClause = regexp.MustCompile(`\bby \(([^)]*)\)`)

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = map[string]bool{"job": true, "instance": true}

// queries returns the PromQL expressions of the alert rules and of the
// dashboard, each under a name that says where it is.
func queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}

	raw, err := os.ReadFile(filepath.Join("prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("alerts.yaml: rule %q needs alert, expr, labels.severity and annotations.summary", r.Alert)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("alerts.yaml: rule %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			out["alert "+r.Alert] = r.Expr
			alerts++
		}
	}
	for _, want := range []string{"FoundryqRunsStuck", "FoundryqDeadLetters", "FoundryqCompletedAfterCancel", "FoundryqCancelSlow",
		"FoundryqStoreFull", "FoundryqCancelUnconfirmed", "FoundryqCancelsPending", "FoundryqRunsStalled"} {
		if _, ok := out["alert "+want]; !ok {
			t.Errorf("alerts.yaml has no rule %s", want)
		}
	}

	raw, err = os.ReadFile(filepath.Join("grafana", "foundryq.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string           `json:"title"`
		UID    string           `json:"uid"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana/foundryq.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("grafana/foundryq.json: title %q, uid %q, %d panels", dash.Title, dash.UID, len(dash.Panels))
	}
	ids := map[int]bool{}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("dashboard: panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("dashboard: panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				out["panel "+p.Title+" "+q.RefID] = q.Expr
			}
		}
	}
	walk(dash.Panels)
	if alerts == 0 || len(out) == alerts {
		t.Fatalf("found %d alert rules and %d dashboard queries", alerts, len(out)-alerts)
	}
	return out
}

// TestDashboardAndAlertsQueryRealMetrics checks that every metric the
// Grafana dashboard and the alert rules query is served by a worker's
// /metrics (the worker command's registry: its metrics and the Go and
// process collectors) after a run, and that every label they aggregate by
// is one of those metrics' labels.
func TestDashboardAndAlertsQueryRealMetrics(t *testing.T) {
	t.Parallel()
	qs := queries(t)
	served := scrapeWorker(t)
	var missing []string
	for where, expr := range qs {
		names := metricName.FindAllString(expr, -1)
		if len(names) == 0 {
			t.Errorf("%s queries no foundryq metric: %s", where, expr)
		}
		labels := map[string]bool{}
		for _, n := range names {
			if _, ok := served[n]; !ok {
				missing = append(missing, where+": "+n)
			}
			for l := range served[n] {
				labels[l] = true
			}
		}
		for _, by := range byClause.FindAllStringSubmatch(expr, -1) {
			for _, l := range strings.Split(by[1], ",") {
				if l = strings.TrimSpace(l); !labels[l] && !targetLabels[l] {
					missing = append(missing, where+": label "+l+" of "+strings.Join(names, ", "))
				}
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("not in a worker's /metrics:\n  %s", strings.Join(missing, "\n  "))
	}
}

// scrapeWorker runs one run on a devstack worker and returns the sample
// names its /metrics serves (a histogram's _bucket, _sum and _count), each
// with the labels of its series (a histogram's _bucket also le).
func scrapeWorker(t *testing.T) map[string]map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := devstack.StartT(t, devstack.Config{Workers: 1, Worker: consumer.Config{Registerer: reg}})
	req := events.RunRequest{RunID: "metrics-1", Model: "gpt-test", Input: json.RawMessage(`"hello"`)}
	if _, err := s.Client.Submit(ctx, req); err != nil {
		t.Fatal(err)
	}
	w := s.Client.Watch(ctx, req.RunID, events.WatchOptions{})
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("watch the run: %v", err)
		}
		if ev.Type.Terminal() && ev.Type != events.TypeRunCompleted {
			t.Fatalf("the run ended %s", ev.Type)
		}
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	names := map[string]map[string]bool{}
	for name, f := range fams {
		if len(f.GetMetric()) == 0 {
			continue
		}
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names[name] = labels
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"] = maps.Clone(labels)
			names[name+"_bucket"]["le"] = true
			names[name+"_sum"], names[name+"_count"] = labels, labels
		case dto.MetricType_SUMMARY:
			names[name+"_sum"], names[name+"_count"] = labels, labels
		}
	}
	if names["foundryq_runs_finished_total"] == nil {
		t.Fatalf("the worker's /metrics has no foundryq_runs_finished_total: %d families", len(names))
	}
	return names
}
