package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A recording is what a recording proxy in front of keystone and the
// region wrote: one JSON object a line, an exchange (service, method, path
// with query, request and response with headers and bodies, status, t in
// unix seconds) or a marker ({"event": "..."}). Markers this package
// reads:
//
//   - "setup": a control plane's setup begins (our recorder writes it);
//   - "ready": the control plane's own setup (by its start script) ends;
//   - "scenario: ..." begins a scenario, "scenario end..." ends one (the
//     control plane is set up again after it, up to the next "ready");
//   - "test: <name>" begins the exchanges of test <name> (our own
//     recorder writes them, see internal/testsupport/cloudpods).
//
// Recordings made without test markers are cut by the line numbers a
// Split names.

// Split names the cassette that begins at a line of a recording (1-based),
// or at the marker "test: <Name>" when Line is 0.
type Split struct {
	Name string
	Line int
}

// Source is one recording and how it is cut into cassettes.
type Source struct {
	// File is the recording's path.
	File string
	// What says what ran (it goes into each cassette's Source).
	What string
	// Splits, in the recording's order; none cuts at every "scenario:" or
	// "test:" marker, naming each cassette by Names, or without Names each
	// "test: <name>" by its test.
	Splits []Split
	// Names names the cassettes cut at markers, in order; a marker without
	// a name here is dropped (with its exchanges).
	Names []string
}

// raw is one line of a recording.
type raw struct {
	Event   string  `json:"event"`
	Service string  `json:"service"`
	Method  string  `json:"method"`
	Path    string  `json:"path"`
	Status  int     `json:"status"`
	T       float64 `json:"t"`
	Request struct {
		Body    json.RawMessage   `json:"body"`
		Headers map[string]string `json:"headers"`
	} `json:"request"`
	Response struct {
		Body    json.RawMessage   `json:"body"`
		Headers map[string]string `json:"headers"`
	} `json:"response"`
	line int
}

// Derive cuts a recording into normalised cassettes, by name.
func Derive(src Source) (map[string]*Cassette, error) {
	lines, err := readRaw(src.File)
	if err != nil {
		return nil, err
	}
	type part struct {
		name  string
		cloud CloudInfo
		ex    []raw
	}
	var parts []*part
	var cur *part
	setup := true
	var cloud CloudInfo
	markers := 0
	for _, r := range lines {
		switch {
		case r.Event == "ready":
			setup = false
			continue
		case r.Event == "setup":
			setup, cur, cloud = true, nil, CloudInfo{}
			continue
		case strings.HasPrefix(r.Event, "scenario end"):
			setup, cur = true, nil
			continue
		case strings.HasPrefix(r.Event, "scenario: "):
			setup = false // a scenario on the same control plane
		case setup:
			cloud = setupInfo(cloud, r)
			continue
		}
		if len(src.Splits) > 0 {
			for _, s := range src.Splits {
				if s.Line == r.line {
					cur = &part{name: s.Name, cloud: cloud}
					parts = append(parts, cur)
				}
			}
		} else if strings.HasPrefix(r.Event, "scenario: ") || strings.HasPrefix(r.Event, "test: ") {
			cur = nil
			name := ""
			if len(src.Names) > 0 {
				if markers < len(src.Names) {
					name = src.Names[markers]
				}
			} else if n, ok := strings.CutPrefix(r.Event, "test: "); ok {
				name = strings.NewReplacer("/", "_", " ", "_").Replace(n)
			}
			markers++
			if name != "" {
				cur = &part{name: name, cloud: cloud}
				parts = append(parts, cur)
			}
		}
		if cur == nil || dropped(r) {
			continue
		}
		cur.ex = append(cur.ex, r)
	}
	out := map[string]*Cassette{}
	for _, p := range parts {
		c, err := normalise(p.ex, p.cloud)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", src.File, p.name, err)
		}
		c.Source = src.What
		out[p.name] = c
	}
	return out, nil
}

func readRaw(path string) ([]raw, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []raw
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r raw
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		r.line = n
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// The two services' proxies append as their exchanges end: in the
	// order of t, a marker where it was written.
	last := 0.0
	for i := range out {
		if out[i].Event != "" {
			out[i].T = last
		}
		last = out[i].T
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].T < out[b].T })
	return out, nil
}

// dropped: what the recording proxy answered itself (502 while a service
// was away: a replay's outage closes connections instead), and requests of
// the start script (curl).
func dropped(r raw) bool {
	if r.Event != "" {
		return strings.HasPrefix(r.Event, "scenario") || strings.HasPrefix(r.Event, "test: ") || r.Event == "setup" || r.Event == "ready"
	}
	var text string
	if r.Status == 502 && json.Unmarshal(r.Response.Body, &text) == nil && strings.HasPrefix(text, "proxy:") {
		return true
	}
	return client(r) == "curl"
}

func client(r raw) string {
	ua := r.Request.Headers["user-agent"]
	switch {
	case strings.Contains(ua, "yunion-mps-daemon"):
		return "daemon"
	case strings.HasPrefix(ua, "yunioncloud-go"):
		return "cloudpods"
	case strings.HasPrefix(ua, "curl"):
		return "curl"
	}
	return "other"
}

// setupInfo reads what the start script made: the host record (POST
// /zones/<zone>/hosts) and the admin login.
func setupInfo(c CloudInfo, r raw) CloudInfo {
	if r.Service == "region" && r.Method == "POST" && strings.HasSuffix(pathOnly(r.Path), "/hosts") && r.Status == 200 {
		var req struct {
			Host struct {
				Name      string `json:"name"`
				AccessMAC string `json:"access_mac"`
				AccessIP  string `json:"access_ip"`
			} `json:"host"`
		}
		var ans struct {
			Host struct {
				ID string `json:"id"`
			} `json:"host"`
		}
		_ = json.Unmarshal(r.Request.Body, &req)
		_ = json.Unmarshal(r.Response.Body, &ans)
		c.HostName, c.HostMAC, c.HostIP, c.HostID = req.Host.Name, req.Host.AccessMAC, req.Host.AccessIP, ans.Host.ID
		c.ZoneID = strings.TrimSuffix(strings.TrimPrefix(pathOnly(r.Path), "/zones/"), "/hosts")
	}
	if r.Service == "keystone" && (&Exchange{Service: "keystone", Method: r.Method, Path: r.Path}).login() && c.User == "" {
		var l struct {
			Auth struct {
				Identity struct {
					Password struct {
						User struct {
							Name   string `json:"name"`
							Domain struct {
								Name string `json:"name"`
							} `json:"domain"`
						} `json:"user"`
					} `json:"password"`
				} `json:"identity"`
				Scope struct {
					Project struct {
						Name string `json:"name"`
					} `json:"project"`
				} `json:"scope"`
			} `json:"auth"`
		}
		if json.Unmarshal(r.Request.Body, &l) == nil {
			u := l.Auth.Identity.Password.User
			c.User, c.Domain, c.Project = u.Name, u.Domain.Name, l.Auth.Scope.Project.Name
		}
	}
	if c.Region == "" && r.Service == "keystone" && strings.HasPrefix(pathOnly(r.Path), "/v3/regions") && r.Method == "POST" {
		var reg struct {
			Region struct {
				ID string `json:"id"`
			} `json:"region"`
		}
		if json.Unmarshal(r.Request.Body, &reg) == nil {
			c.Region = reg.Region.ID
		}
	}
	return c
}

var (
	uuidRE   = regexp.MustCompile(`(?:GPU-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	hexRE    = regexp.MustCompile(`\b[0-9a-f]{32}\b`)
	macRE    = regexp.MustCompile(`\b[0-9a-f]{2}(?::[0-9a-f]{2}){5}\b`)
	ipRE     = regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}\b`)
	originRE = regexp.MustCompile(`http://127\.0\.0\.1:\d+(/v3)?`)
	timeRE   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)`)
)

// norm replaces what differs between runs by placeholders.
type norm struct {
	start time.Time
	ids   map[string]string
	vars  map[string]string // a test's names, MACs and addresses -> placeholder
	names []string          // the names, longest first
	n     map[string]int
}

func (n *norm) next(kind string) string {
	n.n[kind]++
	return fmt.Sprintf("{{%s:%d}}", kind, n.n[kind])
}

// chosen records a value a test chose (a name, MAC or address).
func (n *norm) chosen(kind, v string) {
	if v == "" || n.vars[v] != "" {
		return
	}
	n.vars[v] = n.next(kind)
	if kind == "name" {
		n.names = append(n.names, v)
		sort.Slice(n.names, func(a, b int) bool { return len(n.names[a]) > len(n.names[b]) })
	}
}

func (n *norm) str(s string) string {
	s = originRE.ReplaceAllStringFunc(s, func(o string) string {
		if strings.HasSuffix(o, "/v3") {
			return "{{keystone}}/v3"
		}
		return "{{region}}"
	})
	s = timeRE.ReplaceAllStringFunc(s, func(t string) string {
		at, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return t
		}
		return fmt.Sprintf("{{time:%.3f}}", at.Sub(n.start).Seconds())
	})
	// GPU UUIDs are the devices' (device_path): what the daemon found, the
	// same every run.
	s = uuidRE.ReplaceAllStringFunc(s, func(v string) string {
		if strings.HasPrefix(v, "GPU-") {
			return v
		}
		return n.id("id")(v)
	})
	s = hexRE.ReplaceAllStringFunc(s, n.id("hex"))
	s = macRE.ReplaceAllStringFunc(s, func(m string) string { n.chosen("mac", m); return n.vars[m] })
	s = ipRE.ReplaceAllStringFunc(s, func(ip string) string {
		if p := n.vars[ip]; p != "" {
			return p
		}
		return ip
	})
	for _, name := range n.names {
		s = strings.ReplaceAll(s, name, n.vars[name])
	}
	return s
}

// id replaces an id by its placeholder.
func (n *norm) id(kind string) func(string) string {
	return func(v string) string {
		if p, ok := n.ids[v]; ok {
			return p
		}
		p := n.next(kind)
		n.ids[v], n.ids[p] = p, v
		return p
	}
}

// value normalises a decoded JSON value.
func (n *norm) value(v any) any {
	switch x := v.(type) {
	case string:
		return n.str(x)
	case []any:
		for i := range x {
			x[i] = n.value(x[i])
		}
		return x
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x[k] = n.value(x[k])
		}
		return x
	}
	return v
}

func (n *norm) body(b json.RawMessage) (json.RawMessage, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	sortCatalog(v)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(n.value(v)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// sortCatalog puts a keystone catalog (its services, each service's
// endpoints) in one order: keystone answers it in any order, and a client
// must not care.
func sortCatalog(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, e := range m {
		l, isList := e.([]any)
		if isList && (k == "catalog" || k == "endpoints") {
			sort.SliceStable(l, func(a, b int) bool { return catalogKey(l[a]) < catalogKey(l[b]) })
		}
		if isList {
			for _, x := range l {
				sortCatalog(x)
			}
		} else {
			sortCatalog(e)
		}
	}
}

func catalogKey(v any) string {
	m, _ := v.(map[string]any)
	key := ""
	for _, k := range []string{"type", "name", "interface", "url"} {
		if s, ok := m[k].(string); ok {
			key += s + "\x00"
		}
	}
	return key
}

// path normalises a path and its query; the query sorted, its placeholders
// left unescaped (vars.go).
func (n *norm) path(p string) string {
	path, q, _ := strings.Cut(p, "?")
	path = n.str(unescape(path))
	if q == "" {
		return path
	}
	vals, err := url.ParseQuery(q)
	if err != nil {
		return path + "?" + n.str(q)
	}
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		for _, v := range vals[k] {
			parts = append(parts, url.QueryEscape(k)+"="+escapeKeeping(n.str(v)))
		}
	}
	return path + "?" + strings.Join(parts, "&")
}

// escapeKeeping query-escapes v but for its placeholders.
func escapeKeeping(v string) string {
	var b strings.Builder
	last := 0
	for _, l := range placeholder.FindAllStringIndex(v, -1) {
		b.WriteString(url.QueryEscape(v[last:l[0]]))
		b.WriteString(v[l[0]:l[1]])
		last = l[1]
	}
	b.WriteString(url.QueryEscape(v[last:]))
	return b.String()
}

// normalise turns a part of a recording into a cassette.
func normalise(ex []raw, cloud CloudInfo) (*Cassette, error) {
	if len(ex) == 0 {
		return nil, fmt.Errorf("no exchanges")
	}
	start := time.Unix(0, int64(ex[0].T*1e9)).UTC()
	for _, r := range ex {
		if r.Event == "" {
			start = time.Unix(0, int64(r.T*1e9)).UTC()
			break
		}
	}
	n := &norm{start: start, ids: map[string]string{}, vars: map[string]string{}, n: map[string]int{}}
	// The names and addresses the test chose: in the hosts and guests it
	// made, and the address it looked a network up by.
	for _, r := range ex {
		var b struct {
			Host struct {
				Name, Hostname string
				AccessIP       string `json:"access_ip"`
			} `json:"host"`
			Name string `json:"name"`
		}
		_ = json.Unmarshal(r.Request.Body, &b)
		p := pathOnly(r.Path)
		if r.Method == "POST" && strings.HasSuffix(p, "/hosts") {
			n.chosen("name", b.Host.Name)
			n.chosen("name", b.Host.Hostname)
			n.chosen("ip", b.Host.AccessIP)
		}
		if r.Method == "POST" && p == "/servers/import" {
			n.chosen("name", b.Name)
		}
		if _, q, ok := strings.Cut(r.Path, "?"); ok {
			if v, err := url.ParseQuery(q); err == nil && v.Get("ip") != "" {
				n.chosen("ip", v.Get("ip"))
			}
		}
	}
	c := &Cassette{Cloud: CloudInfo{
		User: cloud.User, Project: cloud.Project, Domain: cloud.Domain, Region: cloud.Region,
		ZoneID: n.str(cloud.ZoneID), HostID: n.str(cloud.HostID), HostName: cloud.HostName,
		HostMAC: n.str(cloud.HostMAC), HostIP: cloud.HostIP,
	}}
	for _, r := range ex {
		if r.Event != "" {
			c.Exchanges = append(c.Exchanges, Exchange{Event: r.Event})
			continue
		}
		e := Exchange{Client: client(r), Service: r.Service, Method: r.Method, Path: n.path(r.Path), Status: r.Status}
		var err error
		if e.Request, err = n.body(r.Request.Body); err != nil {
			return nil, fmt.Errorf("line %d: request: %w", r.line, err)
		}
		if e.Response, err = n.body(r.Response.Body); err != nil {
			return nil, fmt.Errorf("line %d: response: %w", r.line, err)
		}
		c.Exchanges = append(c.Exchanges, e)
	}
	c.Exchanges = collapse(c.Exchanges)
	return c, nil
}

// collapse drops a read that repeats the one before it of the same request
// at the same state (no write between) with the same answer, times aside:
// a replay answers a read it has given all answers to with the last one
// again, so a client polling N times reads the same.
func collapse(ex []Exchange) []Exchange {
	last := map[string]string{} // request -> its last answer in this state
	var out []Exchange
	for _, e := range ex {
		if e.write() {
			clear(last)
			out = append(out, e)
			continue
		}
		if e.Event != "" {
			out = append(out, e)
			continue
		}
		key := e.Service + " " + e.Method + " " + e.Path + " " + string(e.Request)
		ans := strconv.Itoa(e.Status) + " " + timePH.ReplaceAllString(string(e.Response), "{{time}}")
		if last[key] == ans {
			continue
		}
		last[key] = ans
		out = append(out, e)
	}
	return out
}

var timePH = regexp.MustCompile(`\{\{time:[^}]*\}\}`)

// Describe is a one-line summary of a cassette, for logs.
func (c *Cassette) Describe() string {
	w := 0
	for _, e := range c.Exchanges {
		if e.write() {
			w++
		}
	}
	return strconv.Itoa(len(c.Exchanges)) + " exchanges, " + strconv.Itoa(w) + " writes"
}
