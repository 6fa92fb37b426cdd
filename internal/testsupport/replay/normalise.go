package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// How a recording's exchanges become a cassette's: what differs between
// runs replaced by placeholders (vars.go), repeated reads collapsed.

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
