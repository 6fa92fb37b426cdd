package mpsctl

import (
	"testing"

	"yunion.io/x/mps-daemon/tests/pgtest"
)

// TestMain shares one PostgreSQL server among the tests that run on both
// backends (tests/pgtest/storetest) and stops it at the end.
func TestMain(m *testing.M) { pgtest.Main(m) }
