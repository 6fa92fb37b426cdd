package replay

import (
	"encoding/json"
	"strings"
)

// A recording is what the recording proxies in front of a live keystone
// and region write (internal/testsupport/cloudpods, make test-cloudpods):
// one Line of JSON a line, an exchange or a marker. Derive reads it back.
// Both sides go by this type and these markers.

// Line is one line of a recording: an exchange (service, method, path with
// query, status, request and response with their headers and bodies, seq
// and t in unix seconds), or a marker (Event alone).
type Line struct {
	Event   string  `json:"event,omitempty"`
	Seq     int     `json:"seq,omitempty"`
	T       float64 `json:"t,omitempty"`
	Service string  `json:"service,omitempty"`
	Method  string  `json:"method,omitempty"`
	Path    string  `json:"path,omitempty"`
	Status  int     `json:"status,omitempty"`
	// Request and Response are left out of a marker.
	Request  Message `json:"request,omitzero"`
	Response Message `json:"response,omitzero"`
}

// Message is one side of an exchange: the headers kept (lower case; the
// secret ones <redacted>) and the body (JSON, secrets redacted; a body that
// is not JSON as a string; null when empty).
type Message struct {
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

// The markers (Line.Event) Derive reads.
const (
	// EventSetup: a control plane's setup begins (the recorder writes it).
	EventSetup = "setup"
	// EventReady: the control plane's own setup (by its start script) ends.
	EventReady = "ready"
	// EventTest begins the exchanges of the test named after it (TestEvent).
	EventTest = "test: "
	// EventScenario begins a scenario named after it; EventScenarioEnd
	// ends one (the control plane is set up again after it, up to the
	// next EventReady).
	EventScenario    = "scenario: "
	EventScenarioEnd = "scenario end"
	// eventScenarios begins every marker of a scenario.
	eventScenarios = "scenario"
)

// TestEvent is the marker of test name's start.
func TestEvent(name string) string { return EventTest + name }

// marker reports a marker of the recording's structure (as opposed to an
// exchange), which no cassette holds.
func (l Line) marker() bool {
	return strings.HasPrefix(l.Event, eventScenarios) || strings.HasPrefix(l.Event, EventTest) || l.Event == EventSetup || l.Event == EventReady
}
