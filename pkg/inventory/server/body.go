package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
)

// Request bodies, as Cloudpods takes them:
//
//   - a body must say Content-Type: application/json (a charset parameter
//     is fine); anything else is a 415 before it is read. Cloudpods' own
//     clients (climc, the host agent) send that header on every request,
//     bodiless GETs included, so the rule costs them nothing and keeps a
//     form post or a stray text file from being taken for JSON;
//   - a body larger than Options.MaxBodyBytes is a 413 TooLargeEntity;
//   - fields the inventory does not know are ignored, as Cloudpods ignores
//     them (its host agent sends detected_on_host, card_path, ...), and
//     named in one debug line per request; a known field of the wrong JSON
//     type is a 400 naming it.

// requireJSON answers 415 for a request that carries a body whose media
// type is not application/json.
func (s *server) requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				got := r.Header.Get("Content-Type")
				if got == "" {
					got = "none"
				}
				s.writeError(w, &httpError{http.StatusUnsupportedMediaType, api.ClassUnsupportedMediaType,
					"request body: Content-Type must be application/json, not " + got})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads the whole body, at most s.maxBody bytes (413 beyond).
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		return nil, s.bodyError(err)
	}
	return b, nil
}

// decodeBody reads the body as one JSON value into dst (a pointer to a
// struct), refusing an empty body, trailing data and values of the wrong
// type with details that name what is wrong; fields dst does not know are
// logged at debug and ignored.
func (s *server) decodeBody(w http.ResponseWriter, r *http.Request, dst any) error {
	b, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return badInput("request body is empty")
	}
	return s.decodeJSON(r, b, dst)
}

// decodeWrapped reads an action's body into dst, wrapped in keyword
// ({"server": {...}}) or not, as Cloudpods takes both; wrapped says which.
// An empty body is an empty object when optional.
func (s *server) decodeWrapped(w http.ResponseWriter, r *http.Request, keyword string, dst any, optional bool) (wrapped bool, err error) {
	b, err := s.readBody(w, r)
	if err != nil {
		return false, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if optional {
			return false, nil
		}
		return false, badInput("request body is empty")
	}
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(b, &outer); err == nil {
		if inner, ok := outer[keyword]; ok {
			return true, s.decodeJSONAt(r, inner, dst, keyword+".")
		}
	}
	return false, s.decodeJSON(r, b, dst)
}

// decodeJSON is decodeBody for a body already read.
func (s *server) decodeJSON(r *http.Request, b []byte, dst any) error {
	return s.decodeJSONAt(r, b, dst, "")
}

// decodeJSONAt is decodeJSON for the value at prefix (a dotted path ending
// in "." or "") of the request body, so errors name fields by their full
// path.
func (s *server) decodeJSONAt(r *http.Request, b []byte, dst any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			typeErr.Field = prefix + typeErr.Field
		}
		return s.bodyError(err)
	}
	var extra json.RawMessage
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err == nil:
		return badInput("request body holds more than one JSON value")
	default:
		return s.bodyError(err)
	}
	if !s.log.Enabled(r.Context(), slog.LevelDebug) {
		return nil // finding them parses the body again, for a debug line only
	}
	if unknown := unknownFields(b, reflect.TypeOf(dst), prefix); len(unknown) > 0 {
		s.log.Debug("ignoring unknown fields of the request body", "method", r.Method, "path", r.URL.Path, "fields", unknown)
	}
	return nil
}

func (s *server) bodyError(err error) error {
	var (
		maxErr  *http.MaxBytesError
		synErr  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return badInput("request body is empty")
	case errors.As(err, &maxErr):
		return &httpError{http.StatusRequestEntityTooLarge, api.ClassTooLarge,
			"request body is larger than " + strconv.FormatInt(maxErr.Limit, 10) + " bytes"}
	case errors.As(err, &synErr):
		return badInput("malformed JSON at byte %d: %v", synErr.Offset, synErr)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badInput("malformed JSON: unexpected end of body")
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badInput("request body: expected a JSON object, got JSON %s", typeErr.Value)
		}
		return badInput("field %s: expected %s, got JSON %s", typeErr.Field, typeErr.Type, typeErr.Value)
	}
	return badInput("invalid request body: %v", err)
}

// unknownFields lists the keys of the JSON object b that t (a struct, or a
// pointer to one) has no field for, as dotted paths from prefix, looking
// into the objects of known fields whose type is a struct too. It reads
// what json.Unmarshal matched: field names are compared case-insensitively,
// and an embedded struct's fields are the outer one's.
func unknownFields(b []byte, t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Time{}) {
		return nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) != nil {
		return nil // not an object: the decoder said what is wrong
	}
	fields := jsonFields(t)
	var out []string
	for key, raw := range obj {
		ft, ok := fields[strings.ToLower(key)]
		if !ok {
			out = append(out, prefix+key)
			continue
		}
		out = append(out, unknownFields(raw, ft, prefix+key+".")...)
	}
	slices.Sort(out)
	return out
}

// jsonFields maps the lower-cased JSON names of t's fields (embedded
// structs' included) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, taken := out[k]; !taken {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[strings.ToLower(name)] = f.Type
	}
	return out
}
