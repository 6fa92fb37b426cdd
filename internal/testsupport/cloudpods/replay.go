package cloudpods

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/replay"
)

// EnvRecordings names the directory of the cassettes the replays read
// (default: tests/cloudpods/recordings at the module's root).
const EnvRecordings = "MPS_CLOUDPODS_RECORDINGS"

// Live reports whether the tests run against a real control plane: only
// when MPS_CLOUDPODS_DIR names one (make test-cloudpods). Otherwise, in
// make test and CI, they replay what the real one said.
func Live() bool { return os.Getenv(EnvDir) != "" }

// Recordings is the directory of the cassettes.
func Recordings() (string, error) {
	if d := os.Getenv(EnvRecordings); d != "" {
		return d, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "tests", "cloudpods", "recordings"), nil
}

// GetOrReplay is the test's control plane: the process's real one when
// Live (Get), else a replay of the cassette dir/<test name>.json, which
// fails the test on any request the recording does not hold (package
// replay).
func GetOrReplay(t testing.TB, dir string) *Cloud {
	t.Helper()
	if Live() {
		return Get(t)
	}
	return Replay(t, filepath.Join(dir, cassetteName(t)+".json"))
}

// NewOrReplay is New when Live, else GetOrReplay's replay.
func NewOrReplay(t testing.TB, dir string, opts Options) *Cloud {
	t.Helper()
	if Live() {
		return New(t, opts)
	}
	return Replay(t, filepath.Join(dir, cassetteName(t)+".json"))
}

// cassetteName is the test's name as a file name.
func cassetteName(t testing.TB) string {
	return strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
}

// Replay serves the cassette at path (relative to Recordings) as keystone
// and the region, for the test: a Cloud whose URLs are the replay's.
func Replay(t testing.TB, path string) *Cloud {
	t.Helper()
	dir, err := Recordings()
	if err != nil {
		t.Fatal(err)
	}
	s := replay.Serve(t, filepath.Join(dir, path))
	ci := s.Cassette().Cloud
	return &Cloud{
		AuthURL: s.URL() + "/v3", RegionURL: s.URL(),
		User: ci.User, Password: s.Password, Project: ci.Project, Domain: ci.Domain, RegionName: ci.Region,
		ZoneID: s.Fill(ci.ZoneID), HostID: s.Fill(ci.HostID), HostName: s.Fill(ci.HostName),
		HostMAC: s.Fill(ci.HostMAC), HostIP: s.Fill(ci.HostIP),
		replay: s,
	}
}

// ApplyRecorded takes the next n recorded writes of the replay as made:
// what the test made with climc, which a replay cannot run.
func (c *Cloud) ApplyRecorded(t testing.TB, n int) {
	t.Helper()
	c.replay.Apply(t, n)
}

// SetPassword gives a user the recording created its password.
func (c *Cloud) SetPassword(user, password string) { c.replay.SetPassword(user, password) }

// Replaying reports whether c is a replay.
func (c *Cloud) Replaying() bool { return c.replay != nil }

// errReplay: what a replay cannot do (run the real climc, reach MariaDB).
func errReplay(what string) error {
	return fmt.Errorf("%s: not in a replay of recorded exchanges (make test-cloudpods runs the tests against a real control plane)", what)
}
