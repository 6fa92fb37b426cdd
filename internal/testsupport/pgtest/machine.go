package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// What a private cluster needs of the machine: the binaries, the user to
// run them as, a short temporary directory; and the sweep of what killed
// test processes left there.

// findBinaries returns the directory holding initdb and postgres: $EnvBin,
// PATH, then the newest /usr/lib/postgresql/<version>/bin (Debian keeps
// them off PATH).
func findBinaries() (string, error) {
	var dirs []string
	if d := os.Getenv(EnvBin); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, filepath.SplitList(os.Getenv("PATH"))...)
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(versions, func(a, b string) int { return versionOf(b) - versionOf(a) })
	dirs = append(dirs, versions...)
	dirs = append(dirs, "/usr/local/pgsql/bin")
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not set and no initdb and postgres were found on PATH, "+
		"under /usr/lib/postgresql/*/bin or in $%s", errUnavailable, EnvDSN, EnvBin)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// credential is who runs initdb and postgres: nil (this user) unless the
// tests run as root, which PostgreSQL refuses; then the postgres user.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root and there is no postgres user to run the server as: %v", errUnavailable, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("postgres user's ids: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// tempRoot is where cluster directories go: the temporary directory, or
// /tmp when that path is long (a unix socket path has at most 107 bytes) or
// when running as root (the postgres user must be able to reach it).
func tempRoot() string {
	if d := os.TempDir(); len(d) <= 40 && os.Geteuid() != 0 {
		return d
	}
	return "/tmp"
}

// childEnv is the environment of initdb and postgres: this one without the
// PG* variables of whoever runs the tests, in the C locale.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LC_") && !strings.HasPrefix(kv, "LANG=") {
			env = append(env, kv)
		}
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// sweepStale removes the directories of clusters whose test process is
// gone (killed before Main could stop its cluster; the server itself went
// down with it, see start).
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(tempRoot(), dirPrefix+"*-*"))
	for _, d := range dirs {
		pidText, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), dirPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || alive(pid) || postmasterAlive(d) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

func postmasterAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	return err == nil && alive(pid)
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
