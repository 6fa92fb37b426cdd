package viewkit

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// Once builds a test binary's kit at most once (a kit takes a make and a
// few compiles); its zero value is ready.
type Once struct {
	once sync.Once
	kit  Kit
	err  error
}

// Get builds the kit into dir from the checkout at repo on its first call,
// within five minutes, and answers it from then on. A machine without make
// or cc skips the test, or fails it under MPS_REQUIRE_PODMAN=1 (CI, where
// the view's tests must run).
func (o *Once) Get(t testing.TB, repo, dir string) Kit {
	t.Helper()
	o.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		o.kit, o.err = Build(ctx, repo, dir)
	})
	if o.err != nil {
		if os.Getenv("MPS_REQUIRE_PODMAN") == "1" {
			t.Fatal(o.err)
		}
		t.Skip(o.err)
	}
	return o.kit
}
