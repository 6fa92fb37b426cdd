package mpsctl

import (
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/pgtest"
)

// TestMain shares one PostgreSQL server among the tests that run on both
// backends (internal/testsupport/storetest) and stops it at the end.
func TestMain(m *testing.M) { pgtest.Main(m) }
