package client

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/devsync"
)

// What a client remembers of a host's last sync, so that the next one
// costs a request and one indexed read when nothing changed (issue 41):
// the digest of the desired rows it synced, the version of the host's
// rows its first list page answered, and its result. The version is the
// one read before the sync's own writes and before its later pages, so
// anything committed after that read (the sync's own writes included)
// makes the next sync a full one: the safe direction. A sync whose
// desired rows differ, a client that never synced the host (a daemon just
// started), a failed sync and an inventory that answers no version (an
// older mps-inventory, a Cloudpods region) all make full syncs, as before.
// The memory lives as long as the Client: one entry per host synced.

// errUnchanged is hostRows.List's answer when the host's rows are still
// at the version asked about: SyncDevices answers the last result.
var errUnchanged = errors.New("isolated devices unchanged since the last sync")

// syncMemo is a host's last sync.
type syncMemo struct {
	digest  [sha256.Size]byte
	version string
	result  devsync.Result
}

// unchanged is the result of a sync that found the rows as m left them:
// every desired row unchanged, the held ones still held, the devices as
// they were (a copy).
func (m syncMemo) unchanged() devsync.Result {
	r := m.result
	return devsync.Result{
		Unchanged: r.Created + r.Updated + r.Unchanged,
		Held:      slices.Clone(r.Held),
		Devices:   slices.Clone(r.Devices),
	}
}

// syncMemos are a client's, by host id; safe for concurrent use (two
// syncs of one host at once each leave a memo that is right on its own).
type syncMemos struct {
	mu sync.Mutex
	m  map[string]syncMemo
}

func (s *syncMemos) get(hostID string) (syncMemo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.m[hostID]
	return m, ok
}

func (s *syncMemos) put(hostID string, m syncMemo) {
	m.result.Held, m.result.Devices = slices.Clone(m.result.Held), slices.Clone(m.result.Devices)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]syncMemo{}
	}
	s.m[hostID] = m
}

func (s *syncMemos) forget(hostID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, hostID)
}

// digestOf is the digest of a sync's desired rows (as devsync.Desired
// left them): any field of any row, and their order, changes it.
func digestOf(want []api.IsolatedDevice) ([sha256.Size]byte, error) {
	b, err := json.Marshal(want)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("digesting the desired devices: %w", err)
	}
	return sha256.Sum256(b), nil
}
