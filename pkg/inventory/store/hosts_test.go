package store

import (
	"errors"
	"testing"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

func TestHostCRUD(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()

		h, err := s.CreateHost(ctx, api.Host{Name: "gpu-1", AccessIP: "10.0.0.1", HostType: "container"})
		if err != nil {
			t.Fatal(err)
		}
		if h.ID == "" || h.CreatedAt.IsZero() || h.CreatedAt.Location() != time.UTC {
			t.Fatalf("created host lacks id or UTC timestamps: %+v", h)
		}
		for _, key := range []string{h.ID, "gpu-1"} {
			got, err := s.GetHost(ctx, key)
			if err != nil || got != h {
				t.Errorf("GetHost(%s) = %+v, %v; want %+v", key, got, err, h)
			}
		}

		newName := "gpu-1b"
		up, err := s.UpdateHost(ctx, "gpu-1", HostUpdate{Name: &newName, ID: &h.ID, CreatedAt: &h.CreatedAt})
		if err != nil {
			t.Fatal(err)
		}
		if up.Name != newName || up.AccessIP != "10.0.0.1" || up.UpdatedAt.Before(h.UpdatedAt) {
			t.Errorf("updated host = %+v", up)
		}
		if _, err := s.GetHost(ctx, "gpu-1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("old name still found: %v", err)
		}

		if gone, err := s.DeleteHost(ctx, h.ID); err != nil || gone != up {
			t.Fatalf("DeleteHost = %+v, %v; want the host as it was, %+v", gone, err, up)
		}
		if _, err := s.GetHost(ctx, h.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetHost after delete: %v, want ErrNotFound", err)
		}
		if _, err := s.DeleteHost(ctx, h.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("second delete: %v, want ErrNotFound", err)
		}
	})
}

func TestHostRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		h := mustHost(t, s, "gpu-1")
		mustHost(t, s, "gpu-2")
		mustDevice(t, s, slice(h.ID, "06", 0))

		other, empty, badTime := "gpu-2", "", time.Unix(1, 0).UTC()
		tests := []struct {
			name string
			call func() error
			want error
		}{
			{"create without name", func() error { _, err := s.CreateHost(ctx, api.Host{}); return err }, ErrInvalid},
			{"create with id", func() error { _, err := s.CreateHost(ctx, api.Host{ID: "x", Name: "n"}); return err }, ErrInvalid},
			{"create duplicate name", func() error { _, err := s.CreateHost(ctx, api.Host{Name: "gpu-1"}); return err }, ErrDuplicate},
			{"rename onto another host", func() error { _, err := s.UpdateHost(ctx, "gpu-1", HostUpdate{Name: &other}); return err }, ErrDuplicate},
			{"rename to empty", func() error { _, err := s.UpdateHost(ctx, "gpu-1", HostUpdate{Name: &empty}); return err }, ErrInvalid},
			{"change id", func() error { _, err := s.UpdateHost(ctx, "gpu-1", HostUpdate{ID: &other}); return err }, ErrInvalid},
			{"change created_at", func() error { _, err := s.UpdateHost(ctx, "gpu-1", HostUpdate{CreatedAt: &badTime}); return err }, ErrInvalid},
			{"update unknown", func() error { _, err := s.UpdateHost(ctx, "nope", HostUpdate{}); return err }, ErrNotFound},
			{"delete host with devices", func() error { _, err := s.DeleteHost(ctx, "gpu-1"); return err }, ErrNotEmpty},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.call()
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				var se *Error
				if !errors.As(err, &se) || se.Msg == "" {
					t.Errorf("err %v is not a *store.Error with a message", err)
				}
			})
		}
		if got, err := s.GetHost(ctx, "gpu-1"); err != nil || got.ID != h.ID {
			t.Errorf("host changed by refused calls: %+v, %v", got, err)
		}
	})
}

func TestListHosts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, open func() *Store) {
		ctx := t.Context()
		s := open()
		for _, n := range []string{"c", "a", "b"} {
			mustHost(t, s, n)
		}
		tests := []struct {
			name      string
			f         HostFilter
			want      []string
			wantTotal int
		}{
			{"all by name", HostFilter{Limit: 20}, []string{"a", "b", "c"}, 3},
			{"page", HostFilter{Limit: 1, Offset: 1}, []string{"b"}, 3},
			{"past the end", HostFilter{Limit: 5, Offset: 3}, nil, 3},
			{"limit zero counts only", HostFilter{Limit: 0}, nil, 3},
			{"by name", HostFilter{Name: "c", Limit: 20}, []string{"c"}, 1},
			{"unknown name", HostFilter{Name: "z", Limit: 20}, nil, 0},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				hosts, total, err := s.ListHosts(ctx, tt.f)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, h := range hosts {
					got = append(got, h.Name)
				}
				if total != tt.wantTotal || len(got) != len(tt.want) || (len(got) > 0 && fmtList(got) != fmtList(tt.want)) {
					t.Errorf("got %v total %d, want %v total %d", got, total, tt.want, tt.wantTotal)
				}
			})
		}
		if _, _, err := s.ListHosts(ctx, HostFilter{Limit: -1}); !errors.Is(err, ErrInvalid) {
			t.Errorf("negative limit: %v, want ErrInvalid", err)
		}
	})
}
