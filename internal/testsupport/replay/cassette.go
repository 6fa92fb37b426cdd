// Package replay plays a real Cloudpods keystone and region back from what
// they said on the wire: cassettes (tests/cloudpods/recordings) derived from
// recordings of the real services (Derive), served by a Server that answers
// as recorded and fails the test on a request the cassette does not hold, or
// one that differs from it in a field, naming the field. docs/cloudpods.md
// ("Recordings") says where the recordings come from and how to make them
// again.
package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Cassette is the exchanges of one test with keystone and the region, in
// the order they happened, normalised (placeholders, see vars.go).
type Cassette struct {
	// Source names the recording it was derived from and what ran.
	Source string `json:"source"`
	// Cloud is the control plane the test found at its start.
	Cloud CloudInfo `json:"cloud"`
	// Exchanges are the requests and answers.
	Exchanges []Exchange `json:"exchanges"`
}

// CloudInfo is what a test reads of the control plane before its first
// request: the admin user, the region name, the host record the start
// script made and its zone.
type CloudInfo struct {
	User     string `json:"user"`
	Project  string `json:"project"`
	Domain   string `json:"domain"`
	Region   string `json:"region"`
	ZoneID   string `json:"zone_id,omitempty"`
	HostID   string `json:"host_id,omitempty"`
	HostName string `json:"host_name,omitempty"`
	HostMAC  string `json:"host_mac,omitempty"`
	HostIP   string `json:"host_ip,omitempty"`
}

// Exchange is one request and the answer it got, or a marker (Event).
type Exchange struct {
	// Event marks a step of the recorded scenario (no request).
	Event string `json:"event,omitempty"`
	// Client is who sent it: "daemon" (this project's keystone client and
	// region backend), "climc" (Cloudpods' own client) or "test" (the
	// test's own requests to set the scene).
	Client string `json:"client,omitempty"`
	// Service is keystone or region.
	Service string `json:"service,omitempty"`
	Method  string `json:"method,omitempty"`
	// Path is the path and query as sent.
	Path string `json:"path,omitempty"`
	// Request is the body sent (JSON), absent for none.
	Request json.RawMessage `json:"request,omitempty"`
	Status  int             `json:"status,omitempty"`
	// Response is the body answered: JSON, or a JSON string for text.
	Response json.RawMessage `json:"response,omitempty"`
}

// Write reports whether the exchange changes the service's state (write).
func (e Exchange) Write() bool { return e.write() }

// write reports whether the exchange changes the service's state: any
// request but a read, a keystone login and a probe of /ping.
func (e Exchange) write() bool {
	switch {
	case e.Event != "":
		return false
	case e.Method == "GET" || e.Method == "HEAD":
		return false
	case e.login():
		return false
	}
	return true
}

// login is a keystone POST /v3/auth/tokens.
func (e Exchange) login() bool {
	return e.Service == "keystone" && e.Method == "POST" && pathOnly(e.Path) == "/v3/auth/tokens"
}

// loginRequest is what a keystone login sends (its body): a password login's
// user and the project it scopes to, or a token login's token.
type loginRequest struct {
	Auth struct {
		Identity struct {
			Password struct {
				User struct {
					Name     string `json:"name"`
					Password string `json:"password"`
					Domain   struct {
						Name string `json:"name"`
					} `json:"domain"`
				} `json:"user"`
			} `json:"password"`
			Token struct {
				ID string `json:"id"`
			} `json:"token"`
		} `json:"identity"`
		Scope struct {
			Project struct {
				Name string `json:"name"`
			} `json:"project"`
		} `json:"scope"`
	} `json:"auth"`
}

// parseLogin reads a login's body; ok is false for one that is not JSON.
func parseLogin(body []byte) (l loginRequest, ok bool) {
	return l, json.Unmarshal(body, &l) == nil
}

// writeFrom is the index of the first write at or after exchange i, or
// len(Exchanges) when none is left.
func (c *Cassette) writeFrom(i int) int {
	for i < len(c.Exchanges) && !c.Exchanges[i].write() {
		i++
	}
	return i
}

// writeBefore is the index of the last write before exchange i, -1 when
// there is none.
func (c *Cassette) writeBefore(i int) int {
	i--
	for i >= 0 && !c.Exchanges[i].write() {
		i--
	}
	return i
}

// daemonAgent reports whether a request's User-Agent is the daemon's
// (keystone.UserAgent): how the recordings and the replay tell its
// requests from Cloudpods' own clients'.
func daemonAgent(userAgent string) bool { return strings.Contains(userAgent, "yunion-mps-daemon") }

// Load reads a cassette.
func Load(path string) (*Cassette, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c Cassette
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("reading cassette %s: %w", path, err)
	}
	return &c, nil
}

// Save writes c to path: one exchange a line, to read and to diff.
func (c *Cassette) Save(path string) error {
	var b bytes.Buffer
	head, err := json.Marshal(struct {
		Source string    `json:"source"`
		Cloud  CloudInfo `json:"cloud"`
	}{c.Source, c.Cloud})
	if err != nil {
		return err
	}
	b.Write(head[:len(head)-1])
	b.WriteString(",\n\"exchanges\": [\n")
	for i, e := range c.Exchanges {
		var line bytes.Buffer
		enc := json.NewEncoder(&line)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(e); err != nil {
			return err
		}
		b.Write(bytes.TrimSuffix(line.Bytes(), []byte("\n")))
		if i < len(c.Exchanges)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]}\n")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
