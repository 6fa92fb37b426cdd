package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// httpError is an answer the server decides itself (bad query value, bad
// body, no route, no token).
type httpError struct {
	status  int
	class   string
	details string
}

func (e *httpError) Error() string { return e.details }

func badInput(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, api.ClassInputParameter, fmt.Sprintf(format, args...)}
}

// answerFor maps an error to the status and body the client gets, with
// Cloudpods' statuses and classes (its httperrors). Refusals (httpError,
// store.Error) carry their own text; anything else is the server's fault
// and the client gets a generic 500, the cause going to the log only.
//
// A row in use is a 400 BadRequestError, as Cloudpods refuses attaching a
// held device or purging one; DELETE of a held device or of a host with
// devices is a 406 NotEmptyError. Too few free devices is a 400
// InsufficientResourceError. Two deliberate differences: a duplicate is a
// 409 DuplicateResourceError (Cloudpods: 400 "dev addr ... registed"),
// which this project's client relies on to adopt a row a concurrent sync
// created; and rows that keep changing under a request are a 409
// ConflictError, which may be retried (Cloudpods serialises with locks
// and has no such answer). An invalid token never comes here as a store
// refusal: authentication and the keystone routes answer it themselves
// (401, or 404 for a subject token).
func answerFor(err error) (int, api.Error) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, api.Error{Code: he.status, Class: he.class, Details: he.details}
	}
	var se *store.Error
	if errors.As(err, &se) {
		status, class := http.StatusInternalServerError, api.ClassInternal
		switch {
		case errors.Is(se, store.ErrInvalid):
			status, class = http.StatusBadRequest, api.ClassInputParameter
		case errors.Is(se, store.ErrNotFound):
			status, class = http.StatusNotFound, api.ClassNotFound
		case errors.Is(se, store.ErrDuplicate):
			status, class = http.StatusConflict, api.ClassDuplicate
		case errors.Is(se, store.ErrNoCapacity):
			status, class = http.StatusBadRequest, api.ClassInsufficientResource
		case errors.Is(se, store.ErrContention):
			status, class = http.StatusConflict, api.ClassConflict
		case errors.Is(se, store.ErrInUse):
			status, class = http.StatusBadRequest, api.ClassBadRequest
		case errors.Is(se, store.ErrNotEmpty):
			status, class = http.StatusNotAcceptable, api.ClassNotEmpty
		}
		if status != http.StatusInternalServerError {
			return status, api.Error{Code: status, Class: class, Details: se.Msg}
		}
	}
	return http.StatusInternalServerError, api.Error{
		Code: http.StatusInternalServerError, Class: api.ClassInternal, Details: "internal server error",
	}
}

func (s *server) writeError(w http.ResponseWriter, err error) {
	recordError(w, err)
	status, body := answerFor(err)
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own API types are written; they always marshal.
		recordError(w, fmt.Errorf("encoding answer: %w", err))
		status, b = http.StatusInternalServerError, []byte(`{"code":500,"class":"InternalServerError","details":"internal server error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(text))
}
