package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/client"
)

// An attach the inventory answered survives a kill -9 of the inventory:
// concurrent model attaches (which share transactions on SQLite: group
// commit) against one mps-inventory process, killed with SIGKILL while they
// run; restarted on the same file, every device an answer named is still
// held by the guest it was answered to.
func TestAnsweredAttachSurvivesKill(t *testing.T) {
	dir := t.TempDir()
	db, tokenFile, addrFile := filepath.Join(dir, "inventory.db"), filepath.Join(dir, "admin.token"), filepath.Join(dir, "addr")
	startInventory := func() (*proc, *client.Client) {
		_ = os.Remove(addrFile)
		p := start(t, "mps-inventory", "--listen", "127.0.0.1:0", "--db", db, "--admin-token-file", tokenFile, "--address-file", addrFile)
		var addr string
		eventually(t, "inventory address file", func() (bool, string) {
			b, err := os.ReadFile(addrFile)
			addr = strings.TrimSpace(string(b))
			return err == nil && addr != "", p.Output()
		})
		tok, err := os.ReadFile(tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		return p, client.New(client.Options{URL: "http://" + addr, Token: strings.TrimSpace(string(tok)), Retries: -1})
	}
	p, c := startInventory()
	h, err := c.EnsureHost(t.Context(), "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncDevices(t.Context(), h.ID, h100Slices(8, 48)); err != nil {
		t.Fatal(err)
	}

	// 8 workers attach one slice each to new guests until the kill; the
	// kill comes once 100 attaches have been answered.
	var mu sync.Mutex
	answered := map[string]string{} // device id -> guest
	killAt := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				guest := fmt.Sprintf("crash-%d-%d", w, i)
				devs, err := c.AttachIsolatedDevices(t.Context(), guest, api.AttachRequest{Model: "NVIDIA H100 80GB HBM3", Host: "gpu-1", Count: 1})
				if err != nil {
					return // the process is gone (or the slices are)
				}
				mu.Lock()
				answered[devs[0].ID] = guest
				if len(answered) == 100 {
					once.Do(func() { close(killAt) })
				}
				mu.Unlock()
			}
		})
	}
	<-killAt
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	<-p.Done()

	_, c = startInventory()
	list, err := c.ListIsolatedDevices(t.Context(), client.ListOptions{HostID: h.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, d := range list.IsolatedDevices {
		held[d.ID] = d.GuestID
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d attaches answered before the kill, %d devices held after it", len(answered), countHeld(held))
	for id, guest := range answered {
		if held[id] != guest {
			t.Errorf("device %s: answered as attached to %s, after kill -9 held by %q", id, guest, held[id])
		}
	}
}

func countHeld(held map[string]string) int {
	n := 0
	for _, g := range held {
		if g != "" {
			n++
		}
	}
	return n
}
