package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"yunion.io/x/mps-daemon/pkg/api"
)

// HostFilter selects hosts for ListHosts. Limit 0 returns no rows (only the
// total); negative values are refused.
type HostFilter struct {
	Name string
	// AnyMAC keeps the host whose access interface has this MAC (any case),
	// as Cloudpods' host agent looks itself up.
	AnyMAC        string
	Limit, Offset int
}

// HostUpdate names the fields to change; nil leaves a field as it is. ID and
// CreatedAt may be given only with their current value (a client echoing
// the host it read back); any other value is refused.
type HostUpdate struct {
	ID        *string
	CreatedAt *time.Time
	Name      *string
	AccessIP  *string
	AccessMAC *string
	HostType  *string
}

const hostColumns = `id, name, access_ip, host_type, created_at, updated_at, access_mac`

// CreateHost adds a host; the store assigns its id and timestamps.
func (s *Store) CreateHost(ctx context.Context, h api.Host) (api.Host, error) {
	if h.ID != "" {
		return api.Host{}, refuse(ErrInvalid, "id is assigned by the server")
	}
	if h.Name == "" {
		return api.Host{}, missing("name")
	}
	h.AccessMAC = strings.ToLower(h.AccessMAC)
	if err := checkHostLengths(h); err != nil {
		return api.Host{}, err
	}
	h.ID = uuid.NewString()
	h.CreatedAt = s.timestamp()
	h.UpdatedAt = h.CreatedAt
	_, err := s.db.ExecContext(ctx, s.d.bind(`INSERT INTO hosts (`+hostColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		h.ID, h.Name, h.AccessIP, h.HostType, formatTime(h.CreatedAt), formatTime(h.UpdatedAt), h.AccessMAC)
	if err != nil {
		if errors.Is(s.d.constraint(err), ErrDuplicate) {
			return api.Host{}, refuse(ErrDuplicate, "host %q already exists", h.Name)
		}
		return api.Host{}, fmt.Errorf("inserting host %s: %w", h.Name, err)
	}
	return h, nil
}

// GetHost finds a host by id or, failing that, by name.
func (s *Store) GetHost(ctx context.Context, idOrName string) (api.Host, error) {
	return s.getHost(ctx, s.db, idOrName)
}

func (s *Store) getHost(ctx context.Context, q querier, idOrName string) (api.Host, error) {
	return s.readHost(ctx, q, idOrName, "")
}

// lockHost is getHost for a write transaction that then changes or deletes
// the host: on PostgreSQL the row stays locked until the transaction ends,
// so a concurrent UpdateHost waits instead of overwriting this one's
// fields, and a concurrent CreateDevice on the host (whose foreign key
// check takes a share lock on the row) waits for the delete and then fails
// with ErrNotFound.
func (s *Store) lockHost(ctx context.Context, tx *sql.Tx, idOrName string) (api.Host, error) {
	return s.readHost(ctx, tx, idOrName, s.d.forUpdate())
}

func (s *Store) readHost(ctx context.Context, q querier, idOrName, lock string) (api.Host, error) {
	row := s.prep(q).QueryRowContext(ctx, s.d.bind(`SELECT `+hostColumns+` FROM hosts
		WHERE id = ? OR name = ? ORDER BY CASE WHEN id = ? THEN 0 ELSE 1 END LIMIT 1`+lock),
		idOrName, idOrName, idOrName)
	h, err := scanHost(row)
	if errors.Is(err, sql.ErrNoRows) {
		return api.Host{}, refuse(ErrNotFound, "host %q not found", idOrName)
	}
	if err != nil {
		return api.Host{}, fmt.Errorf("reading host %s: %w", idOrName, err)
	}
	return h, nil
}

// ListHosts returns one page of hosts ordered by name, and how many match.
func (s *Store) ListHosts(ctx context.Context, f HostFilter) ([]api.Host, int, error) {
	if err := checkPage(f.Limit, f.Offset); err != nil {
		return nil, 0, err
	}
	var conds []string
	var args []any
	if f.Name != "" {
		conds, args = append(conds, "name = ?"), append(args, f.Name)
	}
	if f.AnyMAC != "" {
		conds, args = append(conds, "access_mac = ?"), append(args, strings.ToLower(f.AnyMAC))
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	var hosts []api.Host
	var total int
	err := s.inTx(ctx, true, func(tx *sql.Tx) error {
		if err := s.prep(tx).QueryRowContext(ctx, s.d.bind(`SELECT COUNT(*) FROM hosts`+where), args...).Scan(&total); err != nil {
			return fmt.Errorf("counting hosts: %w", err)
		}
		if f.Limit == 0 || f.Offset >= total {
			return nil
		}
		lim := s.limitClause(f.Limit)
		rows, err := s.prep(tx).QueryContext(ctx, s.d.bind(`SELECT `+hostColumns+` FROM hosts`+where+` ORDER BY name`+lim.clause+` OFFSET ?`),
			append(append(args, lim.args...), f.Offset)...)
		if err != nil {
			return fmt.Errorf("listing hosts: %w", err)
		}
		defer rows.Close()
		for len(hosts) < f.Limit && rows.Next() {
			h, err := scanHost(rows)
			if err != nil {
				return fmt.Errorf("reading host row: %w", err)
			}
			hosts = append(hosts, h)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, err
	}
	return hosts, total, nil
}

// UpdateHost changes the fields u names.
func (s *Store) UpdateHost(ctx context.Context, idOrName string, u HostUpdate) (api.Host, error) {
	var h api.Host
	err := s.inTx(ctx, false, func(tx *sql.Tx) error {
		var err error
		if h, err = s.lockHost(ctx, tx, idOrName); err != nil {
			return err
		}
		if u.ID != nil && *u.ID != h.ID {
			return refuse(ErrInvalid, "id cannot be changed")
		}
		if u.CreatedAt != nil && !u.CreatedAt.Equal(h.CreatedAt) {
			return refuse(ErrInvalid, "created_at cannot be changed")
		}
		setIf(&h.Name, u.Name)
		setIf(&h.AccessIP, u.AccessIP)
		setIf(&h.AccessMAC, u.AccessMAC)
		setIf(&h.HostType, u.HostType)
		h.AccessMAC = strings.ToLower(h.AccessMAC)
		if h.Name == "" {
			return missing("name")
		}
		if err := checkHostLengths(h); err != nil {
			return err
		}
		h.UpdatedAt = s.timestamp()
		_, err = s.prep(tx).ExecContext(ctx, s.d.bind(`UPDATE hosts SET name = ?, access_ip = ?, access_mac = ?, host_type = ?, updated_at = ? WHERE id = ?`),
			h.Name, h.AccessIP, h.AccessMAC, h.HostType, formatTime(h.UpdatedAt), h.ID)
		if err != nil {
			if errors.Is(s.d.constraint(err), ErrDuplicate) {
				return refuse(ErrDuplicate, "host %q already exists", h.Name)
			}
			return fmt.Errorf("updating host %s: %w", h.ID, err)
		}
		return nil
	})
	if err != nil {
		return api.Host{}, err
	}
	return h, nil
}

// DeleteHost removes a host and returns it as it was. A host that still
// has isolated devices is kept (ErrNotEmpty): its devices must go first, so no
// row points at a missing host. The host's row is locked before its devices
// are counted (see lockHost), so no device can be added between the count
// and the delete.
func (s *Store) DeleteHost(ctx context.Context, idOrName string) (api.Host, error) {
	var h api.Host
	err := s.inTx(ctx, false, func(tx *sql.Tx) error {
		var err error
		if h, err = s.lockHost(ctx, tx, idOrName); err != nil {
			return err
		}
		var n int
		if err := s.prep(tx).QueryRowContext(ctx, s.d.bind(`SELECT COUNT(*) FROM isolated_devices WHERE host_id = ?`), h.ID).Scan(&n); err != nil {
			return fmt.Errorf("counting devices of host %s: %w", h.ID, err)
		}
		if n > 0 {
			return refuse(ErrNotEmpty, "host %q still has %d isolated devices", h.Name, n)
		}
		if _, err := s.prep(tx).ExecContext(ctx, s.d.bind(`DELETE FROM hosts WHERE id = ?`), h.ID); err != nil {
			if errors.Is(s.d.constraint(err), ErrNotFound) {
				// The foreign key of a device row: the host is still in use.
				return refuse(ErrNotEmpty, "host %q still has isolated devices", h.Name)
			}
			return fmt.Errorf("deleting host %s: %w", h.ID, err)
		}
		return nil
	})
	if err != nil {
		return api.Host{}, err
	}
	return h, nil
}

type rowScanner interface{ Scan(dest ...any) error }

func scanHost(r rowScanner) (api.Host, error) {
	var h api.Host
	var created, updated dbTime
	if err := r.Scan(&h.ID, &h.Name, &h.AccessIP, &h.HostType, &created, &updated, &h.AccessMAC); err != nil {
		return api.Host{}, err
	}
	h.CreatedAt, h.UpdatedAt = created.t, updated.t
	return h, nil
}

func checkPage(limit, offset int) error {
	if limit < 0 {
		return refuse(ErrInvalid, "limit must not be negative")
	}
	if offset < 0 {
		return refuse(ErrInvalid, "offset must not be negative")
	}
	return nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}
