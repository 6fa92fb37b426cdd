// Package cloudpods gives tests Cloudpods' keystone and region: a real
// control plane when MPS_CLOUDPODS_DIR names Cloudpods' binaries (make
// test-cloudpods), started by this repository's scripts/cloudpods.sh
// (MariaDB, keystone and region on loopback) with its real climc; else, in
// make test and CI, a replay of what a real one said (replay.go, package
// replay), so the control plane stays out of CI's path.
//
// How to use it: in a package whose tests need Cloudpods, add
// `func TestMain(m *testing.M) { cloudpods.Main(m) }`, then call
// `cloudpods.GetOrReplay(t, dir)` (the process's control plane, or the
// test's cassette under tests/cloudpods/recordings/dir), or `cloudpods.Get(t)`
// in a test that needs a real one (skipped, with its reason, without one).
// Tests of one package share the real one: each uses its own host record
// (CreateHost) or its own names.
//
// The scripts run as root (they start MariaDB as root). Without the
// binaries, or not as root, a test that needs a real control plane is
// skipped, unless MPS_REQUIRE_CLOUDPODS=1: then it fails. With
// MPS_CLOUDPODS_RECORD set, every exchange with the real one is recorded
// there (record.go), with a marker where each test begins.
package cloudpods

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/internal/testsupport/replay"
	"yunion.io/x/mps-daemon/internal/testsupport/shared"
)

// The environment variables this package reads.
const (
	// EnvDir names the directory holding Cloudpods' keystone, region and
	// climc (plain or .xz; or in its bin/).
	EnvDir = "MPS_CLOUDPODS_DIR"
	// EnvRequire, set to 1, turns "Cloudpods is not available" into a failure.
	EnvRequire = "MPS_REQUIRE_CLOUDPODS"
)

// startTimeout bounds scripts/cloudpods.sh up (a cold start takes about 40 s, more
// when it installs MariaDB first; on a 2-core machine with a load of 30 it
// took over 5 minutes, which a bound of 5 turned into a failure).
const startTimeout = 10 * time.Minute

// ErrUnavailable: this machine cannot run the control plane.
var ErrUnavailable = errors.New("Cloudpods keystone/region are not available")

// errShort: go test -short (make test-quick) leaves the control plane out.
var errShort = errors.New("go test -short: the tests against a real Cloudpods are skipped")

// short is go test -short without MPS_REQUIRE_CLOUDPODS=1.
func short() bool { return testing.Short() && os.Getenv(EnvRequire) != "1" }

// Cloud is a running control plane.
type Cloud struct {
	// Dir is the script that started it (scripts/cloudpods.sh); Work is
	// this instance's state, configs and logs
	// (Work/log/{keystone,region,mariadb}.log).
	Dir, Work string
	// AuthURL is keystone's v3 URL (http://127.0.0.1:<port>/v3).
	AuthURL string
	// The admin credentials: user sysadmin in project system of domain Default.
	User, Password, Project, Domain string
	// RegionName is the keystone region of the catalog.
	RegionName string
	// RegionURL is the region service (compute_v2 endpoint).
	RegionURL string
	// ZoneID is the zone holding the default host's network.
	ZoneID string
	// HostID, HostName, HostMAC, HostIP are the host record the script
	// created (host_type container).
	HostID, HostName, HostMAC, HostIP string
	// Climc is the real climc binary.
	Climc string

	// guard stops the control plane if this process ends without Stop.
	guard *guard
	// replay is the server of a replay (GetOrReplay); nil for a real one.
	replay *replay.Server
	// rec records the exchanges with a real one (nil when not recording),
	// through proxies.
	rec     *recorder
	proxies []*http.Server
}

// Dir returns the directory of Cloudpods' binaries, or ErrUnavailable.
func Dir() (string, error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return "", fmt.Errorf("%w: %s names no directory of Cloudpods' keystone, region and climc", ErrUnavailable, EnvDir)
	}
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrUnavailable, EnvDir, err)
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: its scripts need root", ErrUnavailable)
	}
	return filepath.Abs(dir)
}

// script is scripts/cloudpods.sh of this repository.
func script() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "scripts", "cloudpods.sh"), nil
}

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("no go.mod above the working directory")
		}
		d = up
	}
}

// Options shape a new control plane.
type Options struct {
	// HostName, HostMAC, HostIP: the host record created at start (the
	// script's defaults when empty). NoHost creates none.
	HostName, HostMAC, HostIP string
	NoHost                    bool
}

// startAttempts is how many times Start runs the script's up, each time in
// a new work directory on new ports. Once in one .ci/run the region exited
// during its start (its log went with the work directory); the ports are
// free when chosen and taken about 20 s later, and a loaded machine's other
// tests open listeners all the while. A control plane that cannot start
// fails both attempts.
const startAttempts = 2

// Start runs scripts/cloudpods.sh up in a new work directory on free ports, once
// more on others when it fails (startAttempts). An error, and a first
// failure that a second attempt overcame (written to stderr), carry the
// tails of the control plane's logs.
func Start(ctx context.Context, opts Options) (*Cloud, error) {
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		c, err := startOnce(ctx, opts)
		if err == nil {
			for _, e := range errs {
				fmt.Fprintf(os.Stderr, "cloudpods: an earlier start failed, a new one on other ports succeeded: %v\n", e)
			}
			return c, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// startOnce runs the script's up once, in a new work directory on free
// ports; when recording, behind proxies that record each exchange.
func startOnce(ctx context.Context, opts Options) (*Cloud, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	sh, err := script()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	rec, err := openRecorder()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "mps-cloudpods-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(6)
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"CP_DB_PORT="+strconv.Itoa(ports[0]),
		"CP_KEYSTONE_PORT="+strconv.Itoa(ports[1]),
		"CP_KEYSTONE_ADMIN_PORT="+strconv.Itoa(ports[2]),
		"CP_REGION_PORT="+strconv.Itoa(ports[3]),
	)
	var proxies []*http.Server
	if rec != nil {
		rec.event(replay.EventSetup)
		// Clients reach the proxies on the ports the catalog names; the
		// services listen on two more.
		env = append(env, "CP_KEYSTONE_LISTEN="+strconv.Itoa(ports[4]), "CP_REGION_LISTEN="+strconv.Itoa(ports[5]))
		for _, p := range []struct {
			service      string
			public, real int
		}{{"keystone", ports[1], ports[4]}, {"region", ports[3], ports[5]}} {
			srv, err := rec.serve(p.service, p.public, p.real)
			if err != nil {
				return nil, err
			}
			proxies = append(proxies, srv)
		}
	}
	if opts.NoHost {
		env = append(env, "CP_CREATE_HOST=0")
	}
	host := Options{HostName: "gpuhost0", HostMAC: "02:00:00:00:00:01", HostIP: "127.0.0.1"}
	if opts.HostName != "" {
		host.HostName = opts.HostName
	}
	if opts.HostMAC != "" {
		host.HostMAC = opts.HostMAC
	}
	if opts.HostIP != "" {
		host.HostIP = opts.HostIP
	}
	env = append(env, "CP_HOST_NAME="+host.HostName, "CP_HOST_MAC="+host.HostMAC, "CP_HOST_IP="+host.HostIP)

	bin, err := binDir(ctx, dir)
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	g, err := startGuard(sh, work)
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, sh, "up", work, bin)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
	cmd.WaitDelay = 10 * time.Second
	failed := func() { _ = (&Cloud{Dir: sh, Work: work, guard: g, proxies: proxies}).Stop() }
	if err := cmd.Run(); err != nil {
		logs := logTails(work)
		failed()
		return nil, fmt.Errorf("scripts/cloudpods.sh up: %w\n%s%s", err, Tail(out.String(), 4000), logs)
	}
	c, err := read(sh, work)
	if err != nil {
		failed()
		return nil, err
	}
	c.guard, c.rec, c.proxies = g, rec, proxies
	if rec != nil {
		rec.event(replay.EventReady)
	}
	if !opts.NoHost {
		c.HostName, c.HostMAC, c.HostIP = host.HostName, host.HostMAC, host.HostIP
	}
	return c, nil
}

// read parses WORK/cloudpods.env.
func read(dir, work string) (*Cloud, error) {
	f, err := os.Open(filepath.Join(work, "cloudpods.env"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			vars[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	c := &Cloud{
		Dir: dir, Work: work,
		AuthURL: vars["OS_AUTH_URL"], User: vars["OS_USERNAME"], Password: vars["OS_PASSWORD"],
		Project: vars["OS_PROJECT_NAME"], Domain: vars["OS_DOMAIN_NAME"], RegionName: vars["OS_REGION_NAME"],
		RegionURL: vars["CLOUDPODS_REGION_URL"], ZoneID: vars["CLOUDPODS_ZONE_ID"], HostID: vars["CLOUDPODS_HOST_ID"],
		Climc: vars["CLOUDPODS_CLIMC"],
	}
	if c.AuthURL == "" || c.RegionURL == "" || c.Climc == "" {
		return nil, fmt.Errorf("cloudpods.env in %s lacks OS_AUTH_URL, CLOUDPODS_REGION_URL or CLOUDPODS_CLIMC", work)
	}
	return c, nil
}

// Stop stops region, keystone and MariaDB (and the recording proxies) and
// removes the work directory.
func (c *Cloud) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, p := range c.proxies {
		_ = p.Close()
	}
	out, err := exec.CommandContext(ctx, c.Dir, "down", c.Work, "--purge").CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/cloudpods.sh down: %w\n%s", err, out)
	}
	c.guard.disarm()
	return nil
}

// guard is a process that runs the script's down WORK --purge when the
// test process ends without stopping the control plane itself: a test
// binary that go test's -timeout panics, or that is killed, runs no
// TestMain cleanup, and MariaDB, keystone and region (started detached by
// the script) would run on, a few percent of a CPU each, until the
// machine reboots. The guard (in a session of its own, so a signal to the
// test's process group passes it by) reads its stdin, a pipe whose only
// writer is this process: the kernel closes it when this process ends,
// however it ends, and the guard's read returns.
type guard struct {
	cmd *exec.Cmd
	w   io.Closer
}

func startGuard(sh, work string) (*guard, error) {
	cmd := exec.Command("sh", "-c", `read -r _; exec "$0" down "$1" --purge >/dev/null 2>&1`, sh, work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the guard of %s: %w", work, err)
	}
	return &guard{cmd: cmd, w: w}, nil
}

// disarm ends the guard without letting it run the script (Stop did).
func (g *guard) disarm() {
	if g == nil {
		return
	}
	_ = g.cmd.Process.Kill()
	_ = g.cmd.Wait()
	_ = g.w.Close()
}

// RunClimc runs the real climc with args against this control plane as the
// admin user and returns what it printed on stdout and stderr; an exit
// status other than 0 is an error.
func (c *Cloud) RunClimc(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	stdout, stderr, code, err := c.RunClimcAt(ctx, c.Endpoint(), "", args...)
	if err == nil && code != 0 {
		err = fmt.Errorf("climc %s exited with status %d", strings.Join(args, " "), code)
	}
	return stdout, stderr, err
}

// StopRegion kills the region service (SIGTERM, then SIGKILL after 20 s):
// an outage as a host agent sees it. StartRegion brings it back.
func (c *Cloud) StopRegion() error {
	if c.replay != nil {
		c.replay.Down()
		return nil
	}
	pidFile := filepath.Join(c.Work, "run", "region.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %w", pidFile, err)
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 200; i++ {
		if syscall.Kill(pid, 0) != nil {
			return os.Remove(pidFile)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(500 * time.Millisecond)
	return os.Remove(pidFile)
}

// StartRegion starts the region service again with the configuration of
// the first start and waits until it answers.
func (c *Cloud) StartRegion(ctx context.Context) error {
	if c.replay != nil {
		c.replay.Up()
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(c.Work, "log", "region.log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	bin := filepath.Join(c.Work, "bin", "region")
	cmd := exec.Command(bin, "--config", filepath.Join(c.Work, "etc", "region.conf"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Work, "run", "region.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }() // reaped when it exits; Stop signals it by PID
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		if _, _, err := c.RunClimc(ctx, "cloud-region-list"); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("region did not answer after a restart: %w", ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// process is the test process's shared control plane, started by the first
// Get and stopped by Main.
var process = &shared.Resource[*Cloud]{
	Name:  "cloudpods",
	Start: func() (*Cloud, error) { return Start(context.Background(), Options{}) },
	Stop:  func(c *Cloud) error { return c.Stop() },
}

// Main runs the tests of a package (call it from TestMain) and stops the
// shared control plane, if a test started one.
func Main(m *testing.M) {
	os.Exit(Run(m.Run))
}

// Run is Main for a TestMain that does more around m.Run.
func Run(run func() int) int { return process.Run(run) }

// Get returns the process's control plane, starting it on first use. It
// skips the test when Cloudpods is unavailable (fails under
// MPS_REQUIRE_CLOUDPODS=1). Outside Main each test gets its own, stopped
// when the test ends.
func Get(t testing.TB) *Cloud {
	t.Helper()
	if short() {
		skipOrFail(t, errShort)
	}
	c, err := process.Get(t)
	if err != nil {
		skipOrFail(t, err)
	}
	c.mark(t)
	return c
}

// skipOrFail ends a test that could not have a control plane: skipped when
// this machine cannot run one (failed under MPS_REQUIRE_CLOUDPODS=1),
// failed when it could but the start failed.
func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, errShort) {
		t.Skipf("%v (make test-quick; set %s=1 to run them)", err, EnvRequire)
	}
	if errors.Is(err, ErrUnavailable) && os.Getenv(EnvRequire) != "1" {
		t.Skipf("%v (set %s=1 to make this a failure)", err, EnvRequire)
	}
	t.Fatalf("cloudpods: %v", err)
}

// New starts a control plane of the test's own (for tests that stop or
// break it), stopped when the test ends; skipped or failed like Get.
func New(t testing.TB, opts Options) *Cloud {
	t.Helper()
	if short() {
		skipOrFail(t, errShort)
	}
	c, err := Start(context.Background(), opts)
	if err != nil {
		skipOrFail(t, err)
	}
	c.mark(t)
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("cloudpods: %v", err)
		}
	})
	return c
}

// freePorts returns n TCP ports free on 127.0.0.1 right now.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// logTails returns the last lines of each log under WORK/log, for an
// error: the work directory goes when the control plane is stopped.
func logTails(work string) string {
	paths, _ := filepath.Glob(filepath.Join(work, "log", "*"))
	var b strings.Builder
	for _, p := range paths {
		data, err := readTail(p, 2000)
		if err != nil || len(data) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n--- %s (its end) ---\n%s", filepath.Base(p), data)
	}
	return b.String()
}

// readTail reads at most the last n bytes of the file at path.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, err
	}
	off := max(fi.Size()-n, 0)
	data := make([]byte, fi.Size()-off)
	_, err = f.ReadAt(data, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data, nil
}

// Tail is the last n bytes of s (a program's output, for a failure
// message), marked with "..." when cut.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
