package replay

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// redacted is what the recordings hold for a secret (a password, a token).
const redacted = "<redacted>"

// A request matches an exchange when it has the same service, method and
// path, the same query parameters (order aside), and a body of the same
// fields with the same values: every field the recording has, and no
// other. Placeholders bind as vars.go says; a redacted secret matches any
// string. A mismatch is told field by field.

// diffRequest lists how the request (method, path with query, body) differs
// from the exchange; nothing when it matches. Placeholders are bound only
// when it matches.
func diffRequest(b *Bindings, e Exchange, method, path string, body []byte) []string {
	trial := b.trial()
	var diffs []string
	if e.Method != method {
		diffs = append(diffs, fmt.Sprintf("method %s, recorded %s", method, e.Method))
	}
	diffs = append(diffs, diffPath(trial, e.Path, path)...)
	diffs = append(diffs, diffBody(trial, e.Request, body)...)
	if len(diffs) == 0 {
		b.commit(trial)
	}
	return diffs
}

// diffPath compares paths and their queries.
func diffPath(b *Bindings, want, got string) []string {
	wp, wq, _ := strings.Cut(want, "?")
	gp, gq, _ := strings.Cut(got, "?")
	var diffs []string
	if !b.match(unescape(wp), unescape(gp)) {
		diffs = append(diffs, fmt.Sprintf("path %s, recorded %s", gp, wp))
	}
	wv, _ := url.ParseQuery(wq)
	gv, _ := url.ParseQuery(gq)
	keys := map[string]bool{}
	for k := range wv {
		keys[k] = true
	}
	for k := range gv {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		w, g := wv[k], gv[k]
		switch {
		case w == nil:
			diffs = append(diffs, fmt.Sprintf("query parameter %s=%s sent, not recorded", k, strings.Join(g, ",")))
		case g == nil:
			diffs = append(diffs, fmt.Sprintf("query parameter %s=%s recorded, not sent", k, strings.Join(w, ",")))
		case len(w) != len(g):
			diffs = append(diffs, fmt.Sprintf("query parameter %s: %q sent, %q recorded", k, g, w))
		default:
			for i := range w {
				if !b.match(w[i], g[i]) {
					diffs = append(diffs, fmt.Sprintf("query parameter %s: %q sent, %q recorded", k, g[i], w[i]))
				}
			}
		}
	}
	return diffs
}

func unescape(p string) string {
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

// diffBody compares a JSON body with the recorded one.
func diffBody(b *Bindings, want json.RawMessage, got []byte) []string {
	if len(want) == 0 && len(strings.TrimSpace(string(got))) == 0 {
		return nil
	}
	var w, g any
	if len(want) > 0 {
		if err := json.Unmarshal(want, &w); err != nil {
			return []string{fmt.Sprintf("the recorded body is not JSON: %v", err)}
		}
	}
	if len(strings.TrimSpace(string(got))) > 0 {
		if err := json.Unmarshal(got, &g); err != nil {
			return []string{fmt.Sprintf("the body sent is not JSON: %v", err)}
		}
	}
	return diffValue(b, "body", w, g)
}

// diffValue compares a value sent (got) with the recorded one (want), at
// the field path at.
func diffValue(b *Bindings, at string, want, got any) []string {
	return diffWords(b, words{"sent", "recorded"}, at, want, got)
}

// words name the two sides in a difference.
type words struct{ got, want string }

func diffWords(b *Bindings, wd words, at string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("field %s: %s %s, %s an object", at, short(got), wd.got, wd.want)}
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		var diffs []string
		for _, k := range sortedKeys(keys) {
			wv, inW := w[k]
			gv, inG := g[k]
			switch {
			case !inW:
				diffs = append(diffs, fmt.Sprintf("field %s.%s %s (%s), not %s", at, k, wd.got, short(gv), wd.want))
			case !inG:
				diffs = append(diffs, fmt.Sprintf("field %s.%s %s (%s), not %s", at, k, wd.want, short(wv), wd.got))
			default:
				diffs = append(diffs, diffWords(b, wd, at+"."+k, wv, gv)...)
			}
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("field %s: %s %s, %s %s", at, short(got), wd.got, short(want), wd.want)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, diffWords(b, wd, fmt.Sprintf("%s[%d]", at, i), w[i], g[i])...)
		}
		return diffs
	case string:
		g, ok := got.(string)
		if ok && (w == redacted || b.match(w, g)) {
			return nil
		}
		return []string{fmt.Sprintf("field %s: %s %s, %s %s", at, short(got), wd.got, short(want), wd.want)}
	}
	if !jsonEqual(want, got) {
		return []string{fmt.Sprintf("field %s: %s %s, %s %s", at, short(got), wd.got, short(want), wd.want)}
	}
	return nil
}

func jsonEqual(a, b any) bool {
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return string(ab) == string(bb)
}

// short is a value for a message.
func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// trial is a copy of b whose bindings commit applies to b: a comparison
// that fails binds nothing.
func (b *Bindings) trial() *Bindings {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := newBindings(b.fixed)
	for k, v := range b.vals {
		t.vals[k] = v
	}
	for k, v := range b.owner {
		t.owner[k] = v
	}
	return t
}

func (b *Bindings) commit(t *Bindings) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, v := range t.vals {
		b.vals[k] = v
	}
	for k, v := range t.owner {
		b.owner[k] = v
	}
}

// pathOnly is a path without its query.
func pathOnly(p string) string {
	p, _, _ = strings.Cut(p, "?")
	return p
}

// sameRoute reports whether a request could be the exchange at all: the
// same method and the same path once placeholders are allowed anywhere.
func sameRoute(e Exchange, method, path string) bool {
	if e.Method != method {
		return false
	}
	w := strings.Split(pathOnly(e.Path), "/")
	g := strings.Split(unescape(pathOnly(path)), "/")
	if len(w) != len(g) {
		return false
	}
	return routeEqual(w, g)
}

func routeEqual(w, g []string) bool {
	for i := range w {
		if strings.Contains(w[i], "{{") {
			continue
		}
		if w[i] != g[i] {
			return false
		}
	}
	return true
}

// DiffJSON names the fields two JSON documents differ in (want the
// expected one), as a replay names them.
func DiffJSON(want, got []byte, wantName, gotName string) []string {
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		return []string{fmt.Sprintf("the expected document is not JSON: %v", err)}
	}
	if err := json.Unmarshal(got, &g); err != nil {
		return []string{fmt.Sprintf("the document is not JSON: %v", err)}
	}
	return diffWords(NewBindings(""), words{gotName, wantName}, "answer", w, g)
}
