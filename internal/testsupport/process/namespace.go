package process

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// InNamespace runs the test named test of this test binary again, in a
// user and mount namespace of its own where it is root (the test tells
// the two runs apart by a variable of env), and returns that run's
// output. The test is skipped where user namespaces are not allowed, and
// fails unless the run passed.
func InNamespace(t *testing.T, test string, env ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(err.Error(), "operation not permitted") {
		t.Skipf("no user namespace here: %v", err)
	}
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("%s in a user and mount namespace: %v\n%s", test, err, out)
	}
	return string(out)
}
