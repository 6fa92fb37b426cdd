package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"yunion.io/x/mps-daemon/pkg/api"
)

func mustHost(t *testing.T, s *Store, name string) api.Host {
	t.Helper()
	h, err := s.CreateHost(t.Context(), api.Host{Name: name})
	if err != nil {
		t.Fatalf("CreateHost %s: %v", name, err)
	}
	return h
}

// slice is virtual device i of the GPU at bus on hostID, as the agent
// registers it.
func slice(hostID, bus string, i int) api.IsolatedDevice {
	return api.IsolatedDevice{
		Name:                fmt.Sprintf("mps-%s-%d", bus, i),
		HostID:              hostID,
		DevType:             api.DevTypeNvidiaMPS,
		Model:               "Tesla P40",
		Addr:                fmt.Sprintf("%s:00.0-%d", bus, i),
		VendorDeviceID:      "10de:1b38",
		DevicePath:          "GPU-" + bus,
		NumaNode:            -1,
		PCIEInfo:            &api.PCIEInfo{LaneWidth: 16, Throughput: "15.76 GB/s", TransferRatePerLane: "8GT/s", Version: "3.0"},
		Index:               -1,
		DeviceMinor:         -1,
		MPSMemoryLimit:      24576 / 4,
		MPSMemoryTotal:      24576,
		MPSThreadPercentage: 25,
	}
}

func mustDevice(t *testing.T, s *Store, d api.IsolatedDevice) api.IsolatedDevice {
	t.Helper()
	got, err := s.CreateDevice(t.Context(), d)
	if err != nil {
		t.Fatalf("CreateDevice %s: %v", d.Addr, err)
	}
	return got
}

func TestOpenMigratesOnceAndReopenKeepsData(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		before := migrationRows(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		s = open()
		if after := migrationRows(t, s); after != before {
			t.Errorf("reopen changed schema_migrations:\nbefore %s\nafter  %s", before, after)
		}
		ms, err := loadMigrations(s.d.migrations)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(before, "1 0001_init.sql ") || strings.Count(before, ";")+1 != len(ms) {
			t.Errorf("schema_migrations = %q, want the %d migrations from 0001_init.sql on", before, len(ms))
		}
		if got, err := s.GetHost(ctx, "gpu-1"); err != nil || got.ID != h.ID {
			t.Errorf("host after reopen = %+v, %v; want id %s", got, err, h.ID)
		}
		if s.Dialect() != "sqlite" {
			return
		}
		for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "10000"} {
			var got string
			if err := s.db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil || got != want {
				t.Errorf("PRAGMA %s = %q, %v; want %s", pragma, got, err, want)
			}
		}
	})
}

func migrationRows(t *testing.T, s *Store) string {
	t.Helper()
	rows, err := s.db.QueryContext(t.Context(), "SELECT version, name, applied_at FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v int
		var name, at string
		if err := rows.Scan(&v, &name, &at); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s %s", v, name, at))
	}
	return strings.Join(out, "; ")
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		if _, err := s.db.ExecContext(t.Context(), `INSERT INTO schema_migrations VALUES (99, '0099_future.sql', 'x')`); err != nil {
			t.Fatal(err)
		}
		// What a second process opening the database runs.
		err := s.migrate(t.Context())
		if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), "version 99") {
			t.Fatalf("migrating a newer database: %v; want ErrSchemaTooNew naming version 99", err)
		}
	})
}

func TestOpenPathWithURICharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir#1", "inv?.db")
	s, err := OpenSQLite(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("OpenSQLite(%q): %v", path, err)
	}
	defer s.Close()
	mustHost(t, s, "h")
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database file not at the path given: %v", err)
	}
}

func TestLoadMigrations(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		fs      fstest.MapFS
		want    []int
		wantErr string
	}{
		{"in order", fstest.MapFS{"0002_b.sql": file("B"), "0001_a.sql": file("A")}, []int{1, 2}, ""},
		{"gap", fstest.MapFS{"0001_a.sql": file("A"), "0003_c.sql": file("C")}, nil, "expected version 0002"},
		{"bad name", fstest.MapFS{"1_a.sql": file("A")}, nil, "not NNNN_name.sql"},
		{"duplicate version", fstest.MapFS{"0001_a.sql": file("A"), "0001_b.sql": file("B")}, nil, "expected version 0002"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := loadMigrations(tt.fs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, m := range ms {
				got = append(got, m.version)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("versions = %v, want %v", got, tt.want)
			}
		})
	}
	// Every schema change exists for both backends, under the same name.
	t.Run("embedded sets", func(t *testing.T) {
		var names [2][]string
		for i, d := range []dialect{sqliteDialect, postgresDialect} {
			ms, err := loadMigrations(d.migrations)
			if err != nil {
				t.Fatalf("%s: %v", d.name, err)
			}
			for _, m := range ms {
				names[i] = append(names[i], m.name)
			}
		}
		if fmt.Sprint(names[0]) != fmt.Sprint(names[1]) {
			t.Errorf("migrations differ:\nsqlite   %v\npostgres %v", names[0], names[1])
		}
	})
}

// ctxDone is a context already cancelled, to check calls honour ctx.
func ctxDone(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

func TestCallsHonourCancelledContext(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		s := open()
		if _, err := s.CreateHost(ctxDone(t), api.Host{Name: "x"}); !errors.Is(err, context.Canceled) {
			t.Errorf("CreateHost with cancelled ctx: %v, want context.Canceled", err)
		}
		if _, _, err := s.ListDevices(ctxDone(t), DeviceFilter{Limit: 10}); !errors.Is(err, context.Canceled) {
			t.Errorf("ListDevices with cancelled ctx: %v, want context.Canceled", err)
		}
	})
}
