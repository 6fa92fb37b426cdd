package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"yunion.io/x/mps-daemon/pkg/api"
)

// The bulk create: POST /isolated_devices with {"isolated_devices": [...]}
// (api.IsolatedDevicesBody) instead of {"isolated_device": {...}}. Each row
// is read, access-checked and validated as a single create is; they are
// created in one transaction (one commit), all or none, in the order
// given, and answered in that order as {"isolated_devices": [...]}, each
// as a single create answers it. A refusal names the row
// ("isolated_devices[3]: field model: ..."). At most api.MaxCreateDevices
// rows (400 beyond), and the body within Options.MaxBodyBytes (413).
//
// An inventory older than it answers such a body 400 "missing field
// isolated_device" (it reads only the single form), which is how a client
// tells it has none (pkg/inventory/client).

// bulkBody is a bulk create's body. isolated_device is read only to refuse
// a body holding both forms.
type bulkBody struct {
	IsolatedDevice  json.RawMessage   `json:"isolated_device"`
	IsolatedDevices []json.RawMessage `json:"isolated_devices"`
}

// bulkList is the value of isolated_devices in the body b, and whether b
// asks for a bulk create: it holds isolated_devices, other than null. A
// body that is no JSON object does not, and the single create's decoding
// says what is wrong with it.
func bulkList(b []byte) (json.RawMessage, bool) {
	var probe struct {
		IsolatedDevices json.RawMessage `json:"isolated_devices"`
	}
	if json.Unmarshal(b, &probe) != nil {
		return nil, false
	}
	v := bytes.TrimSpace(probe.IsolatedDevices)
	return v, len(v) > 0 && !bytes.Equal(v, []byte("null"))
}

// createDevices serves a bulk create whose body, already read, is b, and
// whose isolated_devices is list.
func (s *server) createDevices(w http.ResponseWriter, r *http.Request, b []byte, list json.RawMessage) error {
	if list[0] != '[' {
		return badInput("field isolated_devices: expected a list of isolated devices, got JSON %s", jsonKind(list))
	}
	var body bulkBody
	if err := s.decodeJSON(r, b, &body); err != nil {
		return err
	}
	if v := bytes.TrimSpace(body.IsolatedDevice); len(v) > 0 && !bytes.Equal(v, []byte("null")) {
		return badInput("send isolated_device (one device) or isolated_devices (a list), not both")
	}
	if n := len(body.IsolatedDevices); n > api.MaxCreateDevices {
		return badInput("field isolated_devices: at most %d isolated devices in one request, not %d", api.MaxCreateDevices, n)
	}
	ins := make([]*deviceInput, len(body.IsolatedDevices))
	for i, raw := range body.IsolatedDevices {
		ins[i] = new(deviceInput)
		if err := s.decodeJSONAt(r, raw, ins[i], fmt.Sprintf("isolated_devices[%d].", i)); err != nil {
			return err
		}
	}
	if err := s.mayCreateDevices(r, ins, true); err != nil {
		return err
	}
	devs := make([]api.IsolatedDevice, len(ins))
	for i, in := range ins {
		d, err := in.create()
		if err != nil {
			return atRow(i, err)
		}
		devs[i] = d
	}
	created, err := s.st.CreateDevices(r.Context(), devs)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, devicesView{IsolatedDevices: viewDevices(created)})
	return nil
}

// atRow names row i of a bulk create in a refusal the server decided
// itself (a body or access error); the store names rows itself.
func atRow(i int, err error) error {
	var he *httpError
	if errors.As(err, &he) {
		return &httpError{he.status, he.class, fmt.Sprintf("isolated_devices[%d]: %s", i, he.details)}
	}
	return err
}

// jsonKind names the kind of the JSON value v (not empty), for an error.
func jsonKind(v json.RawMessage) string {
	switch v[0] {
	case '{':
		return "object"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	}
	return "number"
}
