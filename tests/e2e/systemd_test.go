package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// notifySocket is a NOTIFY_SOCKET this test owns: it receives what the
// daemon would tell systemd.
type notifySocket struct {
	path string
	mu   sync.Mutex
	msgs []string
	// devicesAtReady is how many devices the inventory held when READY=1 came.
	devicesAtReady int
	onReady        func() int
}

func newNotifySocket(t *testing.T, onReady func() int) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "ns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := &notifySocket{path: filepath.Join(dir, "notify"), devicesAtReady: -1, onReady: onReady}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			msg := string(buf[:k])
			ready := -1
			if strings.Contains(msg, "READY=1") && n.onReady != nil {
				ready = n.onReady()
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, msg)
			if ready >= 0 && n.devicesAtReady < 0 {
				n.devicesAtReady = ready
			}
			n.mu.Unlock()
		}
	}()
	return n
}

func (n *notifySocket) count(substr string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, m := range n.msgs {
		if strings.Contains(m, substr) {
			c++
		}
	}
	return c
}

func (n *notifySocket) all() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.Join(n.msgs, " | ")
}

func TestSystemdNotifyReloadAndWatchdog(t *testing.T) {
	_, url := startInventory(t, "127.0.0.1:0")
	e := newEnv(t, url, "127.0.0.1:0")
	ns := newNotifySocket(t, func() int { return listAll(t, url).Total })
	d := startEnv(t, []string{"NOTIFY_SOCKET=" + ns.path, "WATCHDOG_USEC=400000"}, "mps-daemon", "--config", e.hostConf, "--simulate", "8xH100")

	eventually(t, "READY=1", func() (bool, string) { return ns.count("READY=1") > 0, ns.all() })
	ns.mu.Lock()
	atReady := ns.devicesAtReady
	ns.mu.Unlock()
	if atReady != 10 {
		t.Errorf("READY=1 came with %d of 10 devices registered: it must follow the first full reconcile", atReady)
	}
	if ns.count("STATUS=SIMULATED: 4 GPUs, 10 virtual devices, inventory reachable") == 0 {
		t.Errorf("no STATUS line saying what the daemon does: %s", ns.all())
	}
	eventually(t, "watchdog pings", func() (bool, string) { return ns.count("WATCHDOG=1") >= 2, ns.all() })

	// systemctl reload: SIGHUP, framed by RELOADING=1 and READY=1.
	readies := ns.count("READY=1")
	if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "RELOADING=1 then READY=1", func() (bool, string) {
		return ns.count("RELOADING=1") == 1 && ns.count("READY=1") == readies+1, ns.all()
	})

	// An edit of the YAML is followed without a signal.
	e.writeDevices(t, 6)
	eventually(t, "13 devices after the edit", func() (bool, string) {
		n := listAll(t, url).Total
		return n == 13, time.Now().String()
	})
	if d.Exited() {
		t.Fatalf("daemon exited:\n%s", d.Output())
	}
}
