package replay

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What differs from one run of the same exchanges to the next is written in
// a cassette as a placeholder, {{kind:n}}, alone or inside a string:
//
//   - id: an id the region or keystone made (a UUID, or keystone's 32 hex
//     digits), or one a client made up (a guest's id);
//   - name, mac, ip: the host names, guest names, MACs and addresses a test
//     chose (they carry a counter, so each run of a test has its own);
//   - time: a time, as seconds after the recording's first exchange;
//   - keystone, region: the services' base URLs.
//
// In a replay each placeholder stands for one value: the first value a
// client sends where the cassette has it binds it, and from then on the
// client must send that value wherever the cassette has the placeholder,
// and no other placeholder may stand for the same value (a bijection: a
// client that mixes two hosts up is caught). A placeholder the replay
// answers before any client bound it gets a value made from its number.

// placeholder matches one placeholder.
var placeholder = regexp.MustCompile(`\{\{(id|hex|name|mac|ip|time|keystone|region):?([^}]*)\}\}`)

// Bindings are the values a replay's placeholders stand for; safe for
// concurrent use.
type Bindings struct {
	mu    sync.Mutex
	vals  map[string]string // placeholder -> value
	owner map[string]string // value -> placeholder
	// fixed: the services' URLs and the time base, set by the server.
	fixed func(kind, arg string) (string, bool)
}

func newBindings(fixed func(kind, arg string) (string, bool)) *Bindings {
	return &Bindings{vals: map[string]string{}, owner: map[string]string{}, fixed: fixed}
}

// Value is what the placeholder p ({{kind:n}}) stands for, making one up
// when no client bound it yet.
func (b *Bindings) Value(p string) string {
	m := placeholder.FindStringSubmatch(p)
	if m == nil {
		return p
	}
	if v, ok := b.fixed(m[1], m[2]); ok {
		return v
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.vals[p]; ok {
		return v
	}
	v := made(m[1], m[2])
	b.vals[p], b.owner[v] = v, p
	return v
}

// timeAt is the time {{time:arg}} stands for when the recording began at
// start.
func timeAt(start time.Time, arg string) (string, bool) {
	sec, err := strconv.ParseFloat(arg, 64)
	if err != nil {
		return "", false
	}
	return start.Add(time.Duration(sec * float64(time.Second))).Format("2006-01-02T15:04:05.000000Z"), true
}

// made is the value a replay gives placeholder kind:n that no client bound.
func made(kind, n string) string {
	i, _ := strconv.Atoi(n)
	switch kind {
	case "id":
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	case "hex":
		return fmt.Sprintf("000000000000400080%014d", i)
	case "mac":
		return fmt.Sprintf("02:00:5e:00:%02x:%02x", i>>8&0xff, i&0xff)
	case "ip":
		return fmt.Sprintf("127.99.%d.%d", i>>8&0xff, i&0xff)
	}
	return fmt.Sprintf("replay-%s-%d", kind, i)
}

// Bind makes placeholder p stand for v (a replay toward a server of ours,
// which makes its own ids); false when either is bound to another already.
func (b *Bindings) Bind(p, v string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.vals[p]; ok {
		return cur == v
	}
	if o, ok := b.owner[v]; ok && o != p {
		return false
	}
	b.vals[p], b.owner[v] = v, p
	return true
}

// NewBindings are bindings for walking a cassette toward a server of ours
// (no replay server): base stands for {{keystone}} and {{region}}.
func NewBindings(base string) *Bindings {
	return newBindings(func(kind, arg string) (string, bool) {
		switch kind {
		case "keystone", "region":
			return base, true
		case "time":
			return timeAt(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), arg)
		}
		return "", false
	})
}

// Fill replaces every placeholder in s by its value.
func (b *Bindings) Fill(s string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return placeholder.ReplaceAllStringFunc(s, b.Value)
}

// match reports whether got is what the template want (a string of the
// cassette, placeholders and all) stands for, binding the placeholders it
// has not bound yet; nothing is bound when it does not match.
func (b *Bindings) match(want, got string) bool {
	if !strings.Contains(want, "{{") {
		return want == got
	}
	locs := placeholder.FindAllStringSubmatchIndex(want, -1)
	var re strings.Builder
	re.WriteString("^")
	var names []string
	last := 0
	for _, l := range locs {
		re.WriteString(regexp.QuoteMeta(want[last:l[0]]))
		p := want[l[0]:l[1]]
		kind := want[l[2]:l[3]]
		if v, ok := b.fixedOrBound(p); ok {
			re.WriteString(regexp.QuoteMeta(v))
		} else {
			re.WriteString("(" + pattern(kind) + ")")
			names = append(names, p)
		}
		last = l[1]
	}
	re.WriteString(regexp.QuoteMeta(want[last:]) + "$")
	m := regexp.MustCompile(re.String()).FindStringSubmatch(got)
	if m == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[string]string{}
	for i, p := range names {
		v := m[1+i]
		if prev, ok := seen[p]; ok && prev != v {
			return false
		}
		seen[p] = v
		if o, ok := b.owner[v]; ok && o != p {
			return false // that value is another placeholder's
		}
		if bound, ok := b.vals[p]; ok && bound != v {
			return false
		}
	}
	for p, v := range seen {
		b.vals[p], b.owner[v] = v, p
	}
	return true
}

func (b *Bindings) fixedOrBound(p string) (string, bool) {
	m := placeholder.FindStringSubmatch(p)
	if v, ok := b.fixed(m[1], m[2]); ok {
		return v, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.vals[p]
	return v, ok
}

// pattern is what a value of a kind may look like.
func pattern(kind string) string {
	switch kind {
	case "id":
		return `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`
	case "hex":
		return `[0-9a-f]{32}`
	case "mac":
		return `[0-9a-f]{2}(?::[0-9a-f]{2}){5}`
	case "ip":
		return `[0-9]{1,3}(?:\.[0-9]{1,3}){3}`
	case "time":
		return `[0-9T:.+Z-]+`
	}
	return `[A-Za-z0-9._-]+`
}
