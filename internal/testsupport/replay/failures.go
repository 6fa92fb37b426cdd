package replay

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Failures is a testing.TB that keeps what is reported to it instead of
// failing the test, and runs its cleanups on Done: for tests that show a
// replay (or a comparison) fails when it should, and says why.
type Failures struct {
	testing.TB
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (f *Failures) Helper() {}

func (f *Failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *Failures) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }

func (f *Failures) Failed() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.errs) > 0 }

func (f *Failures) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// Done runs the cleanups, the last first.
func (f *Failures) Done() {
	f.mu.Lock()
	fns := f.cleanups
	f.cleanups = nil
	f.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// All is what was reported, a line each.
func (f *Failures) All() string { f.mu.Lock(); defer f.mu.Unlock(); return strings.Join(f.errs, "\n") }

// Reset forgets what was reported.
func (f *Failures) Reset() { f.mu.Lock(); defer f.mu.Unlock(); f.errs = nil }
