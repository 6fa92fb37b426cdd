package replay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

// A recording (recording.go) is cut into cassettes: by the markers Line
// documents (EventSetup, EventReady, EventScenario, EventScenarioEnd,
// EventTest), or, for recordings made without test markers, by the line
// numbers a Split names.

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

// raw is one line of a recording and its number.
type raw struct {
	Line
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
		case r.Event == EventReady:
			setup = false
			continue
		case r.Event == EventSetup:
			setup, cur, cloud = true, nil, CloudInfo{}
			continue
		case strings.HasPrefix(r.Event, EventScenarioEnd):
			setup, cur = true, nil
			continue
		case strings.HasPrefix(r.Event, EventScenario):
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
		} else if strings.HasPrefix(r.Event, EventScenario) || strings.HasPrefix(r.Event, EventTest) {
			cur = nil
			name := ""
			if len(src.Names) > 0 {
				if markers < len(src.Names) {
					name = src.Names[markers]
				}
			} else if n, ok := strings.CutPrefix(r.Event, EventTest); ok {
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
		if len(p.ex) == 0 {
			continue // a test that said nothing to Cloudpods (climc against an inventory)
		}
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
		return r.marker()
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
	case daemonAgent(ua):
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
		if l, ok := parseLogin(r.Request.Body); ok {
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
