package store

import (
	"errors"
	"fmt"
)

// Sentinels for the refusals callers act on; check them with errors.Is.
var (
	// ErrNotFound: no such host or device.
	ErrNotFound = errors.New("not found")
	// ErrDuplicate: the row would break a uniqueness rule (host name, or a
	// device's (host_id, vendor_device_id, addr)).
	ErrDuplicate = errors.New("duplicate")
	// ErrInUse: the row is held by a guest, so it cannot be given to
	// another guest or purged without force.
	ErrInUse = errors.New("in use")
	// ErrNotEmpty: the row cannot be deleted while something depends on it
	// (a device held by a guest, a host that still has devices).
	ErrNotEmpty = errors.New("not empty")
	// ErrInvalid: a field is missing or has a value the store refuses.
	ErrInvalid = errors.New("invalid")
	// ErrSchemaTooNew: the database was migrated by a newer binary.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
)

// Error is a refusal caused by the caller's input or by the state of the
// data, as opposed to a failure of the database. Msg is written for the
// people using the API (the server sends it as the error details); Kind is
// one of the sentinels above.
type Error struct {
	Kind error
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap lets errors.Is match the sentinel.
func (e *Error) Unwrap() error { return e.Kind }

func refuse(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

func missing(field string) error {
	return refuse(ErrInvalid, "missing required field %s", field)
}
