// Package shared is how a test-support package shares one costly resource
// (a PostgreSQL cluster, a Cloudpods control plane) among the tests of a
// binary: started by the first test that needs it, kept failed when it
// failed to start (the next tests fail fast with the same error), and
// stopped by Run once the tests are over. Outside Run (a package without
// the TestMain) nothing would stop a shared one, so each test gets its
// own, stopped when it ends.
package shared

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// Resource is one resource of a test process.
type Resource[T any] struct {
	// Name prefixes messages ("pgtest", "cloudpods").
	Name string
	// Start makes the resource; Stop ends it.
	Start func() (T, error)
	Stop  func(T) error

	mu      sync.Mutex
	inMain  bool
	started bool
	v       T
	err     error
}

// Run is a TestMain's: it runs run (which calls m.Run), stops the shared
// resource if a test started it, and returns run's code, 1 when stopping
// failed after passing tests.
func (r *Resource[T]) Run(run func() int) int {
	r.mu.Lock()
	r.inMain = true
	r.mu.Unlock()
	code := run()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started && r.err == nil {
		if err := r.Stop(r.v); err != nil {
			fmt.Fprintf(os.Stderr, "%s: stopping the shared test resource: %v\n", r.Name, err)
			if code == 0 {
				code = 1
			}
		}
	}
	var zero T
	r.started, r.v, r.err = false, zero, nil
	return code
}

// Get returns the shared resource, starting it on first use; outside Run a
// resource of t's own, stopped when t ends.
func (r *Resource[T]) Get(t testing.TB) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return r.v, r.err
	}
	if !r.inMain {
		v, err := r.Start()
		if err != nil {
			return v, err
		}
		t.Cleanup(func() {
			if err := r.Stop(v); err != nil {
				t.Errorf("%s: %v", r.Name, err)
			}
		})
		return v, nil
	}
	r.v, r.err = r.Start()
	r.started = true
	return r.v, r.err
}
