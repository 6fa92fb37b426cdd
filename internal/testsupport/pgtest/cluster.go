package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// Processes are started with os.StartProcess, not os/exec: tests/arch keeps
// os/exec out of every non-test file but pkg/mps's, and this package (test
// support only) needs the low-level knobs anyway: the postmaster's own
// process group and a parent-death signal.

const (
	// startTimeout bounds initdb and the server's start-up.
	startTimeout = 2 * time.Minute
	// stopTimeout is how long a fast shutdown may take before the server's
	// process group is killed.
	stopTimeout = 30 * time.Second
	// dirPrefix names the clusters' directories under the temporary
	// directory: mps-pgtest-<pid of the test process>-<random>.
	dirPrefix = "mps-pgtest-"
)

// cluster is a private PostgreSQL server: data directory, unix socket and
// log under one temporary directory, no TCP.
type cluster struct {
	dir    string
	port   int
	proc   *os.Process
	exited chan struct{}
}

func (c *cluster) dsn(database string) string {
	q := url.Values{"host": {c.dir}, "port": {strconv.Itoa(c.port)}, "sslmode": {"disable"}}
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/" + database, RawQuery: q.Encode()}
	return u.String()
}

// startCluster runs initdb and starts the server, ready for connections.
func startCluster() (*cluster, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	sweepStale()
	dir, err := os.MkdirTemp(tempRoot(), fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("creating the cluster directory: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, errors.Join(fmt.Errorf("handing %s to the postgres user: %w", dir, err), os.RemoveAll(dir))
		}
	}
	c := &cluster{dir: dir, port: 20000 + rand.IntN(40000), exited: make(chan struct{})}
	if err := c.initdb(bin, cred); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if err := c.start(bin, cred); err != nil {
		return nil, errors.Join(err, c.stop())
	}
	return c, nil
}

// initdb creates the data directory: superuser postgres, trust auth (only
// the socket in a private directory reaches it), no fsync.
func (c *cluster) initdb(bin string, cred *syscall.Credential) error {
	logf, err := os.Create(filepath.Join(c.dir, "initdb.log"))
	if err != nil {
		return fmt.Errorf("creating the initdb log: %w", err)
	}
	defer logf.Close()
	args := []string{"initdb", "-D", filepath.Join(c.dir, "data"), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync"}
	p, err := os.StartProcess(filepath.Join(bin, "initdb"), args, &os.ProcAttr{
		Dir: c.dir, Env: childEnv(), Files: []*os.File{nil, logf, logf},
		Sys: &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fmt.Errorf("running initdb: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		st, err := p.Wait()
		if err == nil && !st.Success() {
			err = errors.New(st.String())
		}
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(startTimeout):
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		err = fmt.Errorf("no answer in %s", startTimeout)
		<-done
	}
	if err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, tail(filepath.Join(c.dir, "initdb.log")))
	}
	return nil
}

// start runs the postmaster and waits until it takes connections. The
// postmaster gets its own process group (a Ctrl-C in the terminal goes to
// the tests only) and SIGQUIT, PostgreSQL's immediate shutdown, when the
// test process dies: a killed test binary cannot leave a server behind. The
// parent-death signal follows the thread that started the child, so that
// thread stays locked to the goroutine waiting for the server to exit.
func (c *cluster) start(bin string, cred *syscall.Credential) error {
	logf, err := os.Create(filepath.Join(c.dir, "postgres.log"))
	if err != nil {
		return fmt.Errorf("creating the server log: %w", err)
	}
	defer logf.Close()
	args := []string{"postgres", "-D", filepath.Join(c.dir, "data"), "-k", c.dir, "-p", strconv.Itoa(c.port),
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=400", "-c", "shared_buffers=32MB"}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		p, err := os.StartProcess(filepath.Join(bin, "postgres"), args, &os.ProcAttr{
			Dir: c.dir, Env: childEnv(), Files: []*os.File{nil, logf, logf},
			Sys: &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT},
		})
		if err != nil {
			started <- fmt.Errorf("starting postgres: %w", err)
			return
		}
		c.proc = p
		started <- nil
		_, _ = p.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		close(c.exited)
		return err
	}
	return c.waitReady()
}

// waitReady polls until the server answers, exits or startTimeout passes.
func (c *cluster) waitReady() error {
	db, err := sql.Open("pgx", c.dsn("postgres")+"&connect_timeout=5")
	if err != nil {
		return fmt.Errorf("opening a pool on the test server: %w", err)
	}
	defer db.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited while starting:\n%s", tail(filepath.Join(c.dir, "postgres.log")))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after %s: %v\n%s", startTimeout, err, tail(filepath.Join(c.dir, "postgres.log")))
		}
	}
}

// stop shuts the server down (SIGINT: fast shutdown, which disconnects
// clients), kills its process group if that hangs, and removes the
// directory.
func (c *cluster) stop() error {
	var err error
	if c.proc != nil {
		_ = c.proc.Signal(syscall.SIGINT)
		select {
		case <-c.exited:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-c.proc.Pid, syscall.SIGKILL)
			<-c.exited
			err = fmt.Errorf("postgres in %s did not stop in %s; killed", c.dir, stopTimeout)
		}
	}
	if rerr := os.RemoveAll(c.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("removing the test cluster: %w", rerr))
	}
	return err
}
