package server

import (
	"net/http"
	"net/url"
	"strconv"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// A host's sync asks for its rows conditionally (issue 41): the first page
// of its marker walk carries the version of the host's rows the previous
// sync listed (api.ParamDevicesVersion), and while the host's rows are
// still at that version the answer is "unchanged", read from the host's
// version alone (store.DevicesVersion: one statement, no transaction)
// instead of the host's rows. Any write of any of the host's rows, by
// anyone, changes the version (migration 0011), so a stale version, one of
// another host (versions are never handed out twice) or one made up is
// answered the page, as without it: the condition can only save work,
// never skip a change. Every marker page of one host answers the version
// its snapshot saw (DevicePage.HostVersion).

// maxVersionDigits bounds the parameter: a version is a positive int64.
const maxVersionDigits = 19

// devicesVersionParam reads api.ParamDevicesVersion: 0 when absent. It is
// refused, naming the parameter, when it is not a version this inventory
// hands out, when it is not for one host, and when it is not on the first
// page of a marker walk (the condition is about the whole walk).
func devicesVersionParam(q url.Values, f store.DeviceFilter, byMarker bool, marker string) (int64, error) {
	vals, ok := q[api.ParamDevicesVersion]
	if !ok {
		return 0, nil
	}
	const name = api.ParamDevicesVersion
	v := vals[0]
	shown := v
	if len(shown) > 40 {
		shown = shown[:40] + "..."
	}
	switch {
	case len(vals) > 1:
		return 0, badInput("query parameter %s: given %d times, want one version", name, len(vals))
	case len(v) == 0 || len(v) > maxVersionDigits:
		return 0, badInput("query parameter %s: %q is not a version this inventory answered (devices_version of a host's marker page)", name, shown)
	case f.HostID == "":
		return 0, badInput("query parameter %s: only with host (the version is that of one host's devices)", name)
	case !byMarker || marker != "":
		return 0, badInput("query parameter %s: only with paging_marker= (the first page of a marker walk)", name)
	}
	for _, c := range []byte(v) {
		if c < '0' || c > '9' {
			return 0, badInput("query parameter %s: %q is not a version this inventory answered (devices_version of a host's marker page)", name, shown)
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, badInput("query parameter %s: %q is not a version this inventory answered (devices_version of a host's marker page)", name, shown)
	}
	return n, nil
}

// unchanged answers a conditional first page when the host's rows are
// still at version: true when it did (no rows, DevicesUnchanged).
func (s *server) unchanged(w http.ResponseWriter, r *http.Request, f store.DeviceFilter, version int64, desc bool) (bool, error) {
	hv, err := s.st.DevicesVersion(r.Context(), f.HostID)
	if err != nil || hv.Version != version {
		return false, err
	}
	out := deviceMarkerListView{
		IsolatedDevices: []deviceView{}, Limit: f.Limit, MarkerField: "seq", MarkerOrder: markerOrder(desc),
		HostDevicesVersion: api.HostDevicesVersion{DevicesVersion: formatVersion(hv.Version), DevicesUnchanged: true},
	}
	writeJSON(w, http.StatusOK, out)
	return true, nil
}

// formatVersion is a version as answered: "" for none.
func formatVersion(v int64) string {
	if v == 0 {
		return ""
	}
	return strconv.FormatInt(v, 10)
}

func markerOrder(desc bool) string {
	if desc {
		return "DESC"
	}
	return "ASC"
}
