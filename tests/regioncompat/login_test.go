package regioncompat

import (
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/cloudpods"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/server"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// How the real climc logs in to the inventory's keystone face: as a user
// (an API token's name, the token as password) with the token's role, or
// with the token itself as OS_AUTH_TOKEN; a wrong password and a role that
// may not do something are refused as climc users know it.
func TestRealClimcLogin(t *testing.T) {
	cp := cloudpods.Get(t)
	st := storetest.Open(t, storetest.Backends()[0].DSN(t))
	inv, srv := inventorySide(t, cp, st, "ops")
	viewer, _, err := st.CreateToken(t.Context(), store.NewToken{Name: "watcher", Role: store.RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	ep := func(user, password string) cloudpods.Endpoint {
		return cloudpods.Endpoint{AuthURL: srv.URL + "/v3", User: user, Password: password, Project: "system", Domain: "Default", Region: server.DefaultRegion}
	}
	climc := func(e cloudpods.Endpoint, args ...string) result {
		t.Helper()
		o, errOut, code, err := cp.RunClimcAt(t.Context(), e, t.TempDir(), args...)
		if err != nil {
			t.Fatal(err)
		}
		return result{o, errOut, code}
	}

	if r := inv.climc(t, "isolated-device-list"); r.code != 0 || !strings.Contains(r.stdout, "Total: 0") {
		t.Errorf("admin: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := climc(ep("watcher", viewer), "isolated-device-list"); r.code != 0 {
		t.Errorf("viewer list: exit %d %s", r.code, r.stderr)
	}
	r := climc(ep("watcher", viewer), "server-attach-isolated-device", "pod-1", "no-such-device")
	if e := parseClimcError(t, "viewer attach", r.stderr); r.code != 1 || e.Code != 403 || e.Class != "ForbiddenError" {
		t.Errorf("viewer attach: exit %d %+v", r.code, e)
	}
	wrong := viewer[:len(viewer)-1] + "0"
	if wrong == viewer {
		wrong = viewer[:len(viewer)-1] + "1"
	}
	r = climc(ep("watcher", wrong), "isolated-device-list")
	if e := parseClimcError(t, "wrong password", r.stderr); r.code != 1 || e.Code != 401 || e.Class != "UnauthorizedError" {
		t.Errorf("wrong password: exit %d %+v", r.code, e)
	}
	r = climc(ep("someone-else", viewer), "isolated-device-list")
	if e := parseClimcError(t, "wrong user", r.stderr); r.code != 1 || e.Code != 401 {
		t.Errorf("wrong user: exit %d %+v", r.code, e)
	}
	// The API token as OS_AUTH_TOKEN (keystone's token method).
	if r := climc(ep("", ""), "--os-auth-token", viewer, "isolated-device-list"); r.code != 0 {
		t.Errorf("--os-auth-token: exit %d %s", r.code, r.stderr)
	}
	// Another region name than the catalog's is climc's own refusal.
	other := ep("watcher", viewer)
	other.Region = "region9"
	if r := climc(other, "isolated-device-list"); r.code == 0 || !strings.Contains(r.stdout+r.stderr, "region9") {
		t.Errorf("OS_REGION_NAME=region9: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
