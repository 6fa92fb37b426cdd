// Package devsync is the one sync of a host's virtual devices with the rows
// a backend keeps of them (mps-inventory, a Cloudpods region): the key rows
// are matched on, the diff, what a sync reports, and the rule for rows a
// guest holds. Each backend is an adapter (Port) over its own row type.
package devsync

import (
	"context"
	"errors"
	"fmt"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Key identifies a device of a host across syncs, as Cloudpods' host agent
// matches its rows: vendor_device_id and addr.
type Key struct{ VendorDeviceID, Addr string }

// KeyOf is d's key.
func KeyOf(d api.IsolatedDevice) Key { return Key{d.VendorDeviceID, d.Addr} }

// Result says what a sync changed. Held lists the ids of rows that should
// have gone but a guest holds: they stay, pending removal (never handed out
// again), and a later sync removes them once released.
type Result struct {
	Created, Updated, Deleted, Unchanged int
	Held                                 []string
	// Devices are the host's virtual devices as the sync left them (the
	// desired ones, then the held ones), with their ids: what the host
	// needs afterwards without listing them again.
	Devices []api.IsolatedDevice
}

// What a Port answers besides success.
var (
	// ErrHeld: Remove found the row held by a guest and kept it.
	ErrHeld = errors.New("held by a guest")
	// ErrExists: Create lost a race, another writer created the row since
	// the list; the sync adopts it.
	ErrExists = errors.New("created meanwhile")
	// ErrGone: Remove found the row removed by someone else since the list.
	ErrGone = errors.New("removed meanwhile")
)

// Port is a backend's rows of one host, in its own row type R (a wanted
// row is an R too). The device lists it answers are the virtual devices a
// row stands for.
type Port[R any] interface {
	// Key is r's key and its id in the backend.
	Key(r R) (k Key, id string)
	// List lists the rows of the host the sync owns.
	List(ctx context.Context) ([]R, error)
	Create(ctx context.Context, want R) ([]api.IsolatedDevice, error)
	// Update makes cur what want describes; written is false when it
	// already was.
	Update(ctx context.Context, cur, want R) (devs []api.IsolatedDevice, written bool, err error)
	// Remove removes r; a row a guest holds it keeps, flagged pending
	// removal where the backend can, and answers its devices and ErrHeld.
	Remove(ctx context.Context, r R) (held []api.IsolatedDevice, err error)
}

// BatchCreator is a Port that can create many rows in one call (one
// request, one transaction); Sync then hands it every row it must create
// at once, in want's order, instead of one Create each. pkg/region's port
// has none: a Cloudpods region creates one row per request.
type BatchCreator[R any] interface {
	// CreateAll creates want in its order and answers each row's devices,
	// in that order. On error it answers those of the rows it created
	// before the error (a prefix of want; none from a backend that creates
	// all or none). ErrExists: one of want exists already (another writer
	// created it since the list); Sync creates the rest one by one then,
	// adopting what exists.
	CreateAll(ctx context.Context, want []R) ([][]api.IsolatedDevice, error)
}

// Sync makes the port's rows what want describes: missing rows are created
// in want's order (all in one call where the port is a BatchCreator,
// before the updates), changed ones updated, the others removed, a held
// one never (it is reported in Held, its devices pending removal). With
// the same want a second call changes nothing. On error the result counts
// what was done.
func Sync[R any](ctx context.Context, p Port[R], want []R) (Result, error) {
	var res Result
	existing, err := p.List(ctx)
	if err != nil {
		return res, err
	}
	byKey := index(p, existing)
	created, err := createBatch(ctx, p, want, byKey)
	if err != nil {
		for _, w := range want {
			k, _ := p.Key(w)
			if devs, ok := created[k]; ok {
				res.Created++
				res.Devices = append(res.Devices, devs...)
			}
		}
		return res, err
	}
	wanted := make(map[Key]bool, len(want))
	for _, w := range want {
		k, _ := p.Key(w)
		wanted[k] = true
		if devs, ok := created[k]; ok {
			res.Created++
			res.Devices = append(res.Devices, devs...)
			continue
		}
		cur, ok := byKey[k]
		if !ok {
			devs, err := p.Create(ctx, w)
			if err == nil {
				res.Created++
				res.Devices = append(res.Devices, devs...)
				continue
			}
			if !errors.Is(err, ErrExists) {
				return res, err
			}
			rows, listErr := p.List(ctx)
			if listErr != nil {
				return res, listErr
			}
			if cur, ok = index(p, rows)[k]; !ok {
				return res, err
			}
		}
		devs, written, err := p.Update(ctx, cur, w)
		if err != nil {
			return res, err
		}
		if written {
			res.Updated++
		} else {
			res.Unchanged++
		}
		res.Devices = append(res.Devices, devs...)
	}
	for _, r := range existing {
		k, id := p.Key(r)
		if wanted[k] {
			continue
		}
		held, err := p.Remove(ctx, r)
		switch {
		case err == nil:
			res.Deleted++
		case errors.Is(err, ErrGone):
		case errors.Is(err, ErrHeld):
			res.Held = append(res.Held, id)
			for _, d := range held {
				d.PendingRemoval = true
				res.Devices = append(res.Devices, d)
			}
		default:
			return res, err
		}
	}
	return res, nil
}

// createBatch hands the rows of want that byKey lacks to p's CreateAll, at
// once, when p is a BatchCreator, and answers the devices of those it
// created, by key. ErrExists is not an error here: Sync creates the rows
// left one by one, adopting the one that exists.
func createBatch[R any](ctx context.Context, p Port[R], want []R, byKey map[Key]R) (map[Key][]api.IsolatedDevice, error) {
	b, ok := p.(BatchCreator[R])
	if !ok {
		return nil, nil
	}
	var missing []R
	for _, w := range want {
		k, _ := p.Key(w)
		if _, listed := byKey[k]; !listed {
			missing = append(missing, w)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	devs, err := b.CreateAll(ctx, missing)
	created := make(map[Key][]api.IsolatedDevice, len(devs))
	for i, d := range devs[:min(len(devs), len(missing))] {
		k, _ := p.Key(missing[i])
		created[k] = d
	}
	if err != nil && !errors.Is(err, ErrExists) {
		return created, err
	}
	return created, nil
}

func index[R any](p Port[R], rows []R) map[Key]R {
	m := make(map[Key]R, len(rows))
	for _, r := range rows {
		k, _ := p.Key(r)
		m[k] = r
	}
	return m
}

// Desired checks the virtual devices a host wants and fills their host_id
// and dev_type: another host's or another dev_type's devices, devices
// without a key and two devices with one key are refused, as a sync cannot
// do them right. Ids, guests and pending_removal are the backend's, cleared.
func Desired(hostID string, desired []api.IsolatedDevice) ([]api.IsolatedDevice, error) {
	if hostID == "" {
		return nil, errors.New("syncing devices: empty host id")
	}
	want := make([]api.IsolatedDevice, len(desired))
	seen := make(map[Key]bool, len(desired))
	for i, d := range desired {
		switch {
		case d.HostID != "" && d.HostID != hostID:
			return nil, fmt.Errorf("syncing devices: %s belongs to host %s, not %s", d.Addr, d.HostID, hostID)
		case d.DevType != "" && d.DevType != api.DevTypeNvidiaMPS:
			return nil, fmt.Errorf("syncing devices: %s has dev_type %s; only %s rows are synced", d.Addr, d.DevType, api.DevTypeNvidiaMPS)
		case d.Addr == "" || d.VendorDeviceID == "":
			return nil, fmt.Errorf("syncing devices: device %d lacks addr or vendor_device_id", i)
		case seen[KeyOf(d)]:
			return nil, fmt.Errorf("syncing devices: %s %s is listed twice", d.VendorDeviceID, d.Addr)
		}
		seen[KeyOf(d)] = true
		d.HostID, d.DevType = hostID, api.DevTypeNvidiaMPS
		d.ID, d.GuestID, d.PendingRemoval = "", "", false
		want[i] = d
	}
	return want, nil
}
