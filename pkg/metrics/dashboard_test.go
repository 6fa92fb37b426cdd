package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// No Grafana can run here (none is packaged for Debian or npm), so the
// dashboard is checked the way Grafana would fail on it: its structure, and
// every PromQL expression's metric names against what the daemon and the
// inventory export. A renamed metric breaks this test, not a panel in
// production. With promtool on PATH, every expression is also parsed by
// Prometheus' own parser (as a recording rule).

const dashboardPath = "../../packaging/grafana/yunion-mps.json"

// externalMetrics are series of other exporters the dashboard joins with.
var externalMetrics = map[string]bool{"DCGM_FI_DEV_GPU_UTIL": true}

type grafanaDashboard struct {
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	SchemaVersion int            `json:"schemaVersion"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *grafanaDS      `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaPanel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *grafanaDS               `json:"datasource"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
	Targets    []struct {
		Expr       string     `json:"expr"`
		RefID      string     `json:"refId"`
		Datasource *grafanaDS `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s is not a dashboard: %v", dashboardPath, err)
	}
	return d
}

// allPanels flattens rows.
func allPanels(ps []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

func TestDashboardStructure(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want both set and a schema that takes a datasource variable (>= 36)", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s does not query the ${datasource} variable", v.Name)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "Hostname": "query", "gpu": "query"} {
		if vars[name] != typ {
			t.Errorf("template variable %s: type %q, want %q", name, vars[name], typ)
		}
	}
	kinds := map[string]bool{"row": true, "stat": true, "timeseries": true, "state-timeline": true, "bargauge": true, "table": true}
	ids := map[int]string{}
	panels := allPanels(d.Panels)
	for _, p := range panels {
		t.Run(p.Title, func(t *testing.T) {
			if other, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("id %d not unique (also %q)", p.ID, other)
			}
			ids[p.ID] = p.Title
			if !kinds[p.Type] {
				t.Errorf("panel type %q", p.Type)
			}
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("gridPos %+v outside the 24-column grid", g)
			}
			if p.Type == "row" {
				return
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" || p.Datasource.Type != "prometheus" {
				t.Errorf("datasource %+v, want the ${datasource} variable", p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Error("no query")
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("target %+v: empty expr or refId, or refId repeated", tg)
				}
				refs[tg.RefID] = true
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("target %s: datasource %+v", tg.RefID, tg.Datasource)
				}
			}
		})
	}
	// Grafana stacks overlapping panels on top of each other.
	for i, a := range panels {
		for _, b := range panels[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			if ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H {
				t.Errorf("panels %q %+v and %q %+v overlap", a.Title, ga, b.Title, gb)
			}
		}
	}
}

// exported is every series name the daemon and the inventory export, the
// _bucket, _sum and _count of their histograms included.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	d := NewDaemon(DaemonOptions{Hostname: "h", Status: hostStatus, AccountingSources: []string{"identity", "ancestor", "environ", "unknown"}})
	d.ObserveReconcile(time.Second, "")
	h := NewHTTP(InventoryPrefix)
	h.Observe("/hosts", "GET", 200, time.Millisecond)
	names := map[string]bool{}
	for _, c := range []prometheus.Collector{d, h} {
		for _, n := range describedNames(c) {
			names[n] = true
		}
		for _, mf := range gather(t, c) {
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[mf.GetName()+s] = true
				}
			}
		}
	}
	return names
}

var (
	promQLStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promQLMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promQLRanges   = regexp.MustCompile(`\[[^\[\]]*\]`)
	promQLGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promQLIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promQLKeywords = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
	}
)

// metricNames are the series names a PromQL expression selects: what is
// left once strings, label matchers, ranges, grouping clauses, functions
// and keywords are taken out.
func metricNames(expr string) []string {
	e := promQLStrings.ReplaceAllString(expr, `""`)
	e = promQLMatchers.ReplaceAllString(e, " ")
	e = promQLRanges.ReplaceAllString(e, " ")
	e = promQLGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, m := range promQLIdent.FindAllString(e, -1) {
		if strings.HasSuffix(m, "(") || promQLKeywords[strings.ToLower(m)] {
			continue // a function or aggregation, or a keyword
		}
		names = append(names, m)
	}
	return names
}

func TestMetricNamesOfAnExpression(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (Hostname, le) (rate(a_bucket{x=~"$h", y="b c"}[$__rate_interval]))`, []string{"a_bucket"}},
		{`count(b == 0) or vector(0)`, []string{"b"}},
		{`c and on (UUID) d{gpu=~"$gpu"}`, []string{"c", "d"}},
		{`time() - e_seconds`, []string{"e_seconds"}},
		{`(1 - f) * g * on(x) group_left(guest) h`, []string{"f", "g", "h"}},
	}
	for _, tt := range tests {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

// dashboardExprs are every query of the dashboard, its variables' included.
func dashboardExprs(t *testing.T, d grafanaDashboard) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			exprs[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = tg.Expr
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_]+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, q.Query)
			continue
		}
		exprs["variable "+v.Name] = m[1]
	}
	return exprs
}

func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	d := loadDashboard(t)
	known := exported(t)
	used := map[string]bool{}
	for where, expr := range dashboardExprs(t, d) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q selects no series", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !known[n] && !externalMetrics[n] {
				t.Errorf("%s: %s is not a series the daemon or the inventory exports (renamed?): %s", where, n, expr)
			}
		}
	}
	// What the dashboard is for: caps vs use per device, clients, health
	// and MPS state per GPU, free and attached devices per host.
	for _, n := range []string{
		"mps_virtual_device_memory_limit_bytes", "mps_virtual_device_memory_used_bytes", "mps_virtual_device_clients",
		"mps_virtual_device_attached", "mps_virtual_device_healthy", "mps_virtual_device_pending_removal",
		"mps_gpu_healthy", "mps_gpu_servers", "mps_gpu_clients", "mps_gpu_control_daemon_up",
		"mps_daemon_reconcile_errors_total", "mps_inventory_http_requests_total",
	} {
		if !used[n] {
			t.Errorf("the dashboard shows nothing of %s", n)
		}
	}
}

// Prometheus' own parser on every expression: each becomes a recording
// rule, with Grafana's variables replaced as Grafana would.
func TestDashboardQueriesParse(t *testing.T) {
	promtool(t)
	d := loadDashboard(t)
	grafanaVars := strings.NewReplacer("$__rate_interval", "5m", "$Hostname", ".*", "$gpu", ".*")
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	exprs := dashboardExprs(t, d)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range exprs {
			if !yield(k) {
				return
			}
		}
	})
	for i, k := range keys {
		e, err := json.Marshal(grafanaVars.Replace(exprs[k]))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rules, "  - record: dashboard:query_%d\n    expr: %s\n", i, e)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runPromtool(t, nil, "check", "rules", path); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s\n%s", err, out, rules.String())
	}
}
