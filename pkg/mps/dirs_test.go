package mps_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/mps"
	"yunion.io/x/mps-daemon/pkg/mps/mpssim"
)

func TestPipeAndLogDirectoriesServeEveryUIDAndNoMore(t *testing.T) {
	// A service manager's umask (or an operator's) must not leave the
	// directories closed to clients of other UIDs.
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	root, err := os.MkdirTemp("", "mpsd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	// The configured root exists but is world-writable: anyone could swap
	// the pipe directory under the daemon.
	if err := os.Mkdir(filepath.Join(root, "pipe"), 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Join(root, "pipe"), 0o777)
	env := mps.Env{PipeDir: filepath.Join(root, "pipe", "GPU-1"), LogDir: filepath.Join(root, "log", "GPU-1"), VisibleDevices: "GPU-1"}
	c := mps.NewController(mpssim.New(nil), env, 5*time.Second, nil)
	if _, err := c.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{env.PipeDir, filepath.Dir(env.PipeDir), env.LogDir, filepath.Dir(env.LogDir)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o755 {
			t.Errorf("%s is %o, want 0755: traversable by every UID, writable by root only", d, got)
		}
	}
}

func TestServerModeSwitchesOnlyWhenIdle(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "mpsm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	r := mpssim.New(nil)
	perUser := mps.Env{PipeDir: dir + "/p", LogDir: dir + "/l", VisibleDevices: "GPU-1"}
	multi := perUser
	multi.MultiUser = true
	if _, err := mps.NewController(r, perUser, 5*time.Second, nil).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if m, known := mps.RecordedMode(perUser.PipeDir); !known || m {
		t.Fatalf("mode recorded %v/%v, want per-user", m, known)
	}
	// A client is connected: switching would kill it, so the daemon stays.
	if _, err := r.AddClient(perUser.PipeDir, 11); err != nil {
		t.Fatal(err)
	}
	adopted, err := mps.NewController(r, multi, 5*time.Second, nil).Ensure(ctx)
	if err != nil || !adopted {
		t.Fatalf("busy daemon: adopted=%v err=%v, want it adopted unchanged", adopted, err)
	}
	if m, _ := mps.RecordedMode(perUser.PipeDir); m {
		t.Fatal("a busy daemon was switched")
	}
	// Idle: the server is gone (the real one exits with its last client only
	// on quit; here the test removes it), so the switch happens.
	if err := r.RemoveClient(perUser.PipeDir, 11); err != nil {
		t.Fatal(err)
	}
	ctl := mps.NewController(r, multi, 5*time.Second, nil)
	servers, _ := ctl.Servers(ctx)
	for _, s := range servers {
		if err := ctl.ShutdownServer(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	adopted, err = ctl.Ensure(ctx)
	if err != nil || adopted {
		t.Fatalf("idle daemon: adopted=%v err=%v, want a fresh start", adopted, err)
	}
	if m, known := mps.RecordedMode(perUser.PipeDir); !known || !m {
		t.Fatal("the restarted daemon should serve every UID (-multiuser-server)")
	}
}
