package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server plays a cassette back as keystone (under /v3) and the region (the
// rest) on one loopback address.
//
// What it answers: the recording is a series of writes (requests that
// change the services: anything but GET, HEAD and a keystone login) with
// reads between them. Writes must come in the recorded order, each the
// same as recorded (diffRequest); a read is answered with a recorded
// answer to the same request between the last write made and the next
// (the same state of the services), in the recorded order, the last one
// again once all were given; where the recording has none at that state,
// the nearest before or after it, across writes of other clients only (a
// test setting the scene between two polls of the daemon, faster than the
// recording saw the daemon poll). So a client that polls more or less often
// than it did when recorded reads what it read then, and a client that
// sends anything the recording does not hold at that point, or differs
// from it in a field, fails the test with the difference named. Keystone's
// secrets are the server's own: it checks passwords (the admin's,
// Password, and those of users the recording creates) and issues tokens;
// a login with a wrong password, and a request with a token it did not
// issue or that was revoked (a user disabled), get the recorded refusal
// where the recording has one at that point.
type Server struct {
	t   testing.TB
	c   *Cassette
	b   *Bindings
	srv *httptest.Server
	// Password is the admin user's.
	Password string

	mu        sync.Mutex
	done      int          // exchanges[:done] hold every write made so far
	lastWrite int          // index of the last write made, -1 for none
	served    map[int]bool // reads given
	passwords map[string]string
	tokens    map[string]token
	down      bool
	closed    bool
	n         int
}

type token struct {
	user    string
	revoked bool
}

// Serve starts a server for the cassette at path, stopped when t ends,
// which also fails t for every recorded write that was not made.
func Serve(t testing.TB, path string) *Server {
	t.Helper()
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return ServeCassette(t, c)
}

// ServeCassette is Serve for a cassette read already.
func ServeCassette(t testing.TB, c *Cassette) *Server {
	t.Helper()
	s := &Server{t: t, c: c, lastWrite: -1, served: map[int]bool{}, tokens: map[string]token{},
		Password: "Replay-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	s.passwords = map[string]string{c.Cloud.User: s.Password}
	start := time.Now().UTC()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.b = newBindings(func(kind, arg string) (string, bool) {
		switch kind {
		case "keystone", "region":
			return s.srv.URL, true
		case "time":
			return timeAt(start, arg)
		}
		return "", false
	})
	s.srv.Start()
	t.Cleanup(s.close)
	return s
}

// Cassette is what the server plays.
func (s *Server) Cassette() *Cassette { return s.c }

// URL is the server's base URL: the region's; keystone's is URL + "/v3".
func (s *Server) URL() string { return s.srv.URL }

// Fill is s with the placeholders' values (the cassette's Cloud fields).
func (s *Server) Fill(v string) string { return s.b.Fill(v) }

// Apply takes the next n recorded writes as made (with their recorded
// bodies): what a test made with a program the replay cannot run (climc
// creating a user, disabling one). Each must be a write of "cloudpods".
func (s *Server) Apply(t testing.TB, n int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		i := s.c.writeFrom(s.done)
		if i == len(s.c.Exchanges) || s.c.Exchanges[i].Client != "cloudpods" {
			t.Fatalf("replay: no recorded write of Cloudpods' own clients to apply at #%d", i)
		}
		e := s.c.Exchanges[i]
		s.done, s.lastWrite = i+1, i
		s.afterWrite(e, e.Request)
	}
}

// SetPassword gives user a password (one the recording created, whose
// password it does not hold).
func (s *Server) SetPassword(user, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.passwords[user] = password
}

// Down makes the region unreachable (connections closed unanswered), as a
// stopped region is; Up brings it back.
func (s *Server) Down() { s.mu.Lock(); s.down = true; s.mu.Unlock() }

// Up ends Down.
func (s *Server) Up() { s.mu.Lock(); s.down = false; s.mu.Unlock() }

func (s *Server) close() {
	s.mu.Lock()
	s.closed = true
	var left []string
	for i := s.done; i < len(s.c.Exchanges); i++ {
		if e := s.c.Exchanges[i]; e.write() {
			left = append(left, fmt.Sprintf("#%d %s %s %s (%s)", i, e.Service, e.Method, e.Path, e.Client))
		}
	}
	s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
	if len(left) > 0 && !s.t.Failed() {
		s.t.Errorf("replay: %d recorded writes were never made, the first: %s", len(left), strings.Join(left[:min(len(left), 3)], "; "))
	}
}

// fail reports a request the cassette does not answer.
func (s *Server) fail(w http.ResponseWriter, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !s.closed {
		s.t.Errorf("replay: %s", msg)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusConflict)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": http.StatusConflict, "class": "ReplayMismatch", "details": msg})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	service := "region"
	if r.URL.Path == "/v3" || strings.HasPrefix(r.URL.Path, "/v3/") {
		service = "keystone"
	}
	if s.closed || service == "region" && s.down {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	s.n++
	path := r.URL.RequestURI()
	probe := Exchange{Service: service, Method: r.Method, Path: r.URL.Path}
	refused := false
	switch {
	case probe.login():
		refused = !s.passwordOK(body)
	default:
		tk, ok := s.tokens[r.Header.Get("X-Auth-Token")]
		refused = !ok || tk.revoked
	}
	var i int
	if probe.write() {
		i = s.nextWrite(w, service, r.Method, path, body)
	} else {
		i = s.read(w, service, r.Method, path, body, refused, clientOf(r))
	}
	if i < 0 {
		return
	}
	s.answer(w, i, body)
}

// nextWrite matches a write with the next recorded one and moves the state
// past it; -1 (and the test failed) when it is not that write.
func (s *Server) nextWrite(w http.ResponseWriter, service, method, path string, body []byte) int {
	i := s.c.writeFrom(s.done)
	if i == len(s.c.Exchanges) {
		s.fail(w, "%s %s %s: a write after the last one recorded", service, method, path)
		return -1
	}
	e := s.c.Exchanges[i]
	if e.Service != service {
		s.fail(w, "%s %s %s: the next recorded write is %s %s %s (#%d)", service, method, path, e.Service, e.Method, e.Path, i)
		return -1
	}
	if diffs := diffRequest(s.b, e, method, path, body); len(diffs) > 0 {
		s.fail(w, "%s %s %s differs from the recorded write #%d (%s %s): %s", service, method, path, i, e.Method, e.Path, strings.Join(diffs, "; "))
		return -1
	}
	s.done, s.lastWrite = i+1, i
	s.afterWrite(e, body)
	return i
}

// read answers a read with a recorded one at this state.
func (s *Server) read(w http.ResponseWriter, service, method, path string, body []byte, refused bool, who string) int {
	end := s.c.writeFrom(s.done)
	var match []int
	var near []string
	candidates := func(from, to int) {
		for i := from; i < to; i++ {
			e := s.c.Exchanges[i]
			if e.Event != "" || e.write() || e.Service != service || !sameRoute(e, method, path) {
				continue
			}
			if diffs := diffRequest(s.b.trial(), e, method, path, body); len(diffs) > 0 {
				near = append(near, fmt.Sprintf("#%d: %s", i, strings.Join(diffs, "; ")))
				continue
			}
			match = append(match, i)
		}
	}
	candidates(s.lastWrite+1, end)
	// None at this state: the last recorded before it, else the first
	// after it, if only another client wrote between (a test setting the
	// scene between two of the daemon's polls, faster than the recording
	// saw it poll); never across a write of the client asking.
	for from := s.lastWrite; len(match) == 0 && from >= 0 && s.c.Exchanges[from].Client != who; {
		prev := s.c.writeBefore(from)
		candidates(prev+1, from)
		if len(match) > 0 {
			match = match[len(match)-1:]
		}
		from = prev
	}
	for to := end; len(match) == 0 && to < len(s.c.Exchanges) && s.c.Exchanges[to].Client != who; {
		next := s.c.writeFrom(to + 1)
		candidates(to+1, next)
		to = next
	}
	if len(match) == 0 {
		msg := fmt.Sprintf("%s %s %s: not recorded at this point (after write #%d)", service, method, path, s.lastWrite)
		if len(near) > 0 {
			msg += "; the nearest: " + strings.Join(near[:min(len(near), 2)], " | ")
		}
		s.fail(w, "%s", msg)
		return -1
	}
	// The answers of the token's kind (refused or not) first, where the
	// recording has any; then the first not given yet, else the last.
	pick := match
	var kind []int
	for _, i := range match {
		if isRefusal(s.c.Exchanges[i].Status) == refused {
			kind = append(kind, i)
		}
	}
	if len(kind) > 0 {
		pick = kind
	}
	chosen := pick[len(pick)-1]
	for _, i := range pick {
		if !s.served[i] {
			chosen = i
			break
		}
	}
	s.served[chosen] = true
	if diffs := diffRequest(s.b, s.c.Exchanges[chosen], method, path, body); len(diffs) > 0 {
		s.fail(w, "%s %s %s: %s", service, method, path, strings.Join(diffs, "; "))
		return -1
	}
	return chosen
}

// clientOf tells the daemon's requests (keystone.UserAgent) from the rest,
// as Derive does.
func clientOf(r *http.Request) string {
	if daemonAgent(r.UserAgent()) {
		return "daemon"
	}
	return "cloudpods"
}

func isRefusal(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// answer writes exchange i's answer, placeholders filled; a login gets a
// new token.
func (s *Server) answer(w http.ResponseWriter, i int, body []byte) {
	e := s.c.Exchanges[i]
	if e.login() && e.Status/100 == 2 {
		tok := fmt.Sprintf("replay-token-%d-%d", i, s.n)
		s.tokens[tok] = token{user: loginUser(body)}
		w.Header().Set("X-Subject-Token", tok)
	}
	var text string
	if json.Unmarshal(e.Response, &text) == nil {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(e.Status)
		_, _ = io.WriteString(w, s.b.Fill(text))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write([]byte(s.b.Fill(string(e.Response))))
}

func loginUser(body []byte) string {
	l, _ := parseLogin(body)
	return l.Auth.Identity.Password.User.Name
}

func (s *Server) passwordOK(body []byte) bool {
	l, ok := parseLogin(body)
	if !ok {
		return false
	}
	if id := l.Auth.Identity.Token.ID; id != "" {
		tk, ok := s.tokens[id]
		return ok && !tk.revoked
	}
	u := l.Auth.Identity.Password.User
	p, ok := s.passwords[u.Name]
	return ok && p == u.Password
}

// afterWrite applies what a keystone write does to the server's secrets:
// a user created gets the password sent, a user disabled loses its tokens.
func (s *Server) afterWrite(e Exchange, body []byte) {
	if e.Service != "keystone" || e.Status/100 != 2 {
		return
	}
	p := pathOnly(s.b.Fill(e.Path))
	switch {
	case e.Method == "POST" && p == "/v3/users":
		var u struct {
			User struct{ Name, Password string } `json:"user"`
		}
		if json.Unmarshal(body, &u) == nil {
			s.passwords[u.User.Name] = u.User.Password
		}
	case e.Method == "POST" && strings.HasSuffix(p, "/disable") && strings.HasPrefix(p, "/v3/users/"):
		name := strings.TrimSuffix(strings.TrimPrefix(p, "/v3/users/"), "/disable")
		for k, tk := range s.tokens {
			if tk.user == name {
				tk.revoked = true
				s.tokens[k] = tk
			}
		}
	}
}
