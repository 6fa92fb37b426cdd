package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/api"
)

// unchangedSyncs counts the daemon's syncs answered "unchanged" by the
// inventory (the client's debug line).
func unchangedSyncs(p *proc) int {
	return strings.Count(p.Output(), `msg="isolated devices unchanged since the last sync"`)
}

// syncsRight starts a daemon against the inventory at url and waits until
// its syncs are answered "unchanged" (the rows as it left them); then each
// change made behind its back (change) must be put right by its next
// syncs, and its syncs answered unchanged again.
func syncsRight(t *testing.T, url string, changes []struct {
	what   string
	change func()
	right  func(map[string]api.IsolatedDevice) bool
}) *proc {
	t.Helper()
	e := newEnv(t, url, "127.0.0.1:0")
	d := startDaemon(t, e)
	eventually(t, "the daemon's syncs answered unchanged", func() (bool, string) { return unchangedSyncs(d) >= 2, d.Output() })
	for _, c := range changes {
		c.change()
		eventually(t, c.what+": put right", func() (bool, string) {
			rows := byAddr(listAll(t, url))
			return c.right(rows), fmt.Sprint(rows)
		})
		n := unchangedSyncs(d)
		eventually(t, c.what+": the syncs answered unchanged again", func() (bool, string) { return unchangedSyncs(d) >= n+2, d.Output() })
		if !c.right(byAddr(listAll(t, url))) {
			t.Errorf("%s: undone again by the syncs after", c.what)
		}
	}
	return d
}

// A daemon whose syncs cost one request while nothing changes puts right,
// at its next sync, a row changed in the database behind its back: a
// value edited with SQL, a row deleted with SQL, a row's flag set
// through the API. On SQLite and on PostgreSQL.
func TestDaemonPutsRightRowsChangedBehindItsBack(t *testing.T) {
	for _, b := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return filepath.Join(t.TempDir(), "inventory.db") }},
		{"postgres", func(t *testing.T) string { return pgtest.DSN(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			f := &inventoryFiles{db: b.dsn(t), tokenFile: filepath.Join(t.TempDir(), "auth", "admin.token")}
			_, url := startInventoryWith(t, "127.0.0.1:0", f)
			registerInventory(t, url, f)
			var first api.IsolatedDevice
			changes := []struct {
				what   string
				change func()
				right  func(map[string]api.IsolatedDevice) bool
			}{
				{"an UPDATE through SQL", func() {
					first = byAddr(listAll(t, url))["18:00.0-0"]
					storetest.Exec(t, f.db, `UPDATE isolated_devices SET mps_memory_limit = 1, mps_thread_percentage = 99 WHERE addr = '18:00.0-0'`)
				}, func(rows map[string]api.IsolatedDevice) bool {
					d := rows["18:00.0-0"]
					return d.MPSMemoryLimit == 20480 && d.MPSThreadPercentage == 25 && d.ID == first.ID
				}},
				{"a DELETE through SQL", func() {
					storetest.Exec(t, f.db, `DELETE FROM isolated_devices WHERE addr = '2a:00.0-1'`)
				}, func(rows map[string]api.IsolatedDevice) bool {
					return rows["2a:00.0-1"].MPSMemoryLimit == 40960 && len(rows) == 10
				}},
				{"a row marked pending removal through the API", func() {
					d := byAddr(listAll(t, url))["db:00.0-0"]
					putDevice(t, url, tokenFor(t, url), d.ID, `{"isolated_device":{"pending_removal":true}}`)
				}, func(rows map[string]api.IsolatedDevice) bool {
					return !rows["db:00.0-0"].PendingRemoval
				}},
			}
			syncsRight(t, url, changes)
		})
	}
}

// Two inventories on one PostgreSQL database, the daemon syncing through
// the first: a change made through the second is put right, and a
// restart of the first (the daemon's memory of its last sync kept) still
// answers unchanged while nothing changed, and puts right what changed.
func TestDaemonSyncsAcrossInventoriesAndRestarts(t *testing.T) {
	dsn := pgtest.DSN(t)
	files := func() *inventoryFiles {
		return &inventoryFiles{db: dsn, tokenFile: filepath.Join(t.TempDir(), "auth", "admin.token")}
	}
	fa, fb := files(), files()
	addrA := freePort(t)
	a, urlA := startInventoryWith(t, addrA, fa)
	registerInventory(t, urlA, fa)
	_, urlB := startInventoryWith(t, "127.0.0.1:0", fb)
	registerInventory(t, urlB, fb)
	tokenB, err := os.ReadFile(fb.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	put := func(url, token, body string) {
		t.Helper()
		putDevice(t, url, token, id, body)
	}
	d := syncsRight(t, urlA, []struct {
		what   string
		change func()
		right  func(map[string]api.IsolatedDevice) bool
	}{{"a change through the other inventory", func() {
		id = byAddr(listAll(t, urlA))["3a:00.0-2"].ID
		put(urlB, strings.TrimSpace(string(tokenB)), `{"isolated_device":{"mps_memory_limit":5}}`)
	}, func(rows map[string]api.IsolatedDevice) bool { return rows["3a:00.0-2"].MPSMemoryLimit == 27306 }}})

	if err := a.Stop(t); err != nil {
		t.Fatal(err)
	}
	n := unchangedSyncs(d)
	startInventoryWith(t, addrA, fa)
	eventually(t, "syncs answered unchanged by the restarted inventory", func() (bool, string) { return unchangedSyncs(d) >= n+2, d.Output() })
	put(urlB, strings.TrimSpace(string(tokenB)), `{"isolated_device":{"mps_thread_percentage":1}}`)
	eventually(t, "the change after the restart put right", func() (bool, string) {
		return byAddr(listAll(t, urlA))["3a:00.0-2"].MPSThreadPercentage == 33, d.Output()
	})
}

// putDevice sends body as a PUT of device id to the inventory at url.
func putDevice(t *testing.T, url, token, id, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "PUT", url+"/isolated_devices/"+id, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s through %s: %d %s", id, url, resp.StatusCode, b)
	}
}
