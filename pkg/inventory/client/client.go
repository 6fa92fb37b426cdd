// Package client talks to the inventory's REST API (mps-inventory, or a
// Cloudpods region that serves the same resources). Every attempt is bounded
// by a timeout; connection errors and 5xx/429 answers are retried with
// exponential backoff and jitter, other answers never are. On top of the
// plain calls it offers what a host agent needs: EnsureHost and an
// idempotent SyncDevices.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/restcall"
)

// Options configures a Client.
type Options struct {
	// URL is the API root, e.g. http://127.0.0.1:9330.
	URL string
	// Token, when set, is sent as `Authorization: Bearer <token>`.
	Token string
	// TokenSource, when set, is asked for the token again after a 401: a
	// local inventory whose database was replaced writes a new admin token
	// file, and a long-running daemon picks it up without a restart.
	TokenSource func() (string, error)
	// Timeout bounds each attempt (connect, send, read the answer); 0 means 10s.
	Timeout time.Duration
	// Retries is how many times a failed attempt is repeated; 0 means 3,
	// negative means none.
	Retries int
	// HTTPClient is used when set (its own Timeout should be 0: Timeout
	// above bounds attempts).
	HTTPClient *http.Client
	Log        *slog.Logger
}

const (
	// maxAnswerBytes bounds what is read of an answer; a page of 2048
	// devices is about 1.5 MB.
	maxAnswerBytes = 32 << 20
	// maxRetryAfter caps how long a Retry-After header may make us wait.
	maxRetryAfter = 30 * time.Second
)

// Client is an inventory API client; it is safe for concurrent use.
type Client struct {
	base    string // URL without a trailing slash
	baseErr error  // a bad Options.URL, returned by every call
	source  func() (string, error)
	tokenMu sync.Mutex
	token   string
	retries int
	call    restcall.Caller
	log     *slog.Logger
	// backoffBase is the first retry's wait; it doubles each retry up to
	// backoffMax (restcall.Policy).
	backoffBase, backoffMax time.Duration
	// pageSize is SyncDevices' page size.
	pageSize int
	// noBulk: the inventory answered a bulk create as one without it does
	// (CreateIsolatedDevices); devices are created one by one since.
	noBulk atomic.Bool
	// memos are SyncDevices' memory of each host's last sync (syncmemo.go).
	memos syncMemos
}

// New returns a client. A malformed URL is reported by the first call.
func New(o Options) *Client {
	c := &Client{
		base: strings.TrimRight(o.URL, "/"), token: o.Token, source: o.TokenSource,
		call: restcall.Caller{MaxAnswer: maxAnswerBytes},
		log:  o.Log, backoffBase: 100 * time.Millisecond, backoffMax: 5 * time.Second,
		pageSize: syncPageSize,
	}
	c.baseErr = CheckURL(o.URL)
	c.call.HTTP, c.call.Timeout, c.retries = restcall.Defaults(o.HTTPClient, o.Timeout, o.Retries)
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// CheckURL refuses an inventory URL a Client cannot use: one that is not
// http(s)://host[:port][/path].
func CheckURL(raw string) error {
	if !restcall.IsHTTPURL(strings.TrimRight(raw, "/")) {
		return fmt.Errorf("inventory URL %q: want http(s)://host[:port][/path]", raw)
	}
	return nil
}

// APIError is an error answer of the API. (It spells out api.Error's fields
// instead of embedding it: an embedded api.Error would be a field named
// Error, which cannot sit beside the Error method.)
type APIError struct {
	Status  int
	Code    int
	Class   string
	Details string
	// retryAfter is the answer's Retry-After, if any.
	retryAfter time.Duration
}

// Error returns the server's details.
func (e *APIError) Error() string {
	if e.Details != "" {
		return e.Details
	}
	return fmt.Sprintf("inventory answered %d %s", e.Status, http.StatusText(e.Status))
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// IsConflict reports whether err is a 409 answer (a duplicate, or rows
// that kept changing under the request).
func IsConflict(err error) bool { return hasStatus(err, http.StatusConflict) }

// IsRefused reports whether err is an attach or detach the inventory
// refused for the state of the devices, as Cloudpods answers it: a device
// another guest holds (400 BadRequestError), too few free devices, or an
// unhealthy or pending one (400 InsufficientResourceError), rows that kept
// changing (409 ConflictError, may succeed if sent again); or, from an
// inventory of before these classes, 409 InvalidStatusError.
func IsRefused(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Class {
	case api.ClassBadRequest, api.ClassInsufficientResource:
		return ae.Status == http.StatusBadRequest
	case api.ClassConflict, api.ClassInvalidStatus:
		return ae.Status == http.StatusConflict
	}
	return false
}

// IsDeviceInUse reports whether err refuses to remove a device a guest
// holds ("Isolated device used by server"), whatever the status code (the
// inventory answers 400 to a purge and 406 to a DELETE, as Cloudpods does;
// the text is what Cloudpods keeps stable).
func IsDeviceInUse(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Details == api.MsgDeviceUsedByServer
}

func hasStatus(err error, status int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == status
}

// noBulkCreate says whether err is how an inventory without the bulk
// create answers one: an mps-inventory older than it reads the body as a
// single create and answers 400 "missing field isolated_device"; a server
// that does not take POST on /isolated_devices at all answers 405, or 404
// for a route it lacks (not a 404 of a host or device it lacks, whose class
// is ResourceNotFoundError).
func noBulkCreate(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusMethodNotAllowed:
		return true
	case http.StatusNotFound:
		return ae.Class == api.ClassHandlerNotFound
	case http.StatusBadRequest:
		return ae.Class == api.ClassInputParameter && ae.Details == "missing field isolated_device"
	}
	return false
}

// do sends one request, retrying what may succeed on another try. in is
// marshalled as the body, the answer unmarshalled into out (both optional).
// Error answers come back as *APIError, unwrapped.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	return c.doRetrying(ctx, retryable, method, path, query, in, out)
}

// doRetrying is do with its own idea of which failures are worth another
// try. After a 401 the token
// is read again once (TokenSource) and, when it changed, the request sent
// again at once.
func (c *Client) doRetrying(ctx context.Context, worthRetrying func(error) bool, method, path string, query url.Values, in, out any) error {
	if c.baseErr != nil {
		return c.baseErr
	}
	var payload []byte
	if in != nil {
		var err error
		if payload, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
	}
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	policy := restcall.Policy{
		Retries: c.retries, First: c.backoffBase, Max: c.backoffMax,
		Retryable: worthRetrying, After: retryAfter,
		Notify: func(err error, wait time.Duration) {
			c.log.Debug("retrying inventory request", "method", method, "path", path, "delay", wait, "error", err)
		},
	}
	refreshed := false
	err := restcall.Retry(ctx, policy, func() error {
		err := c.attempt(ctx, method, target, payload, out)
		if err != nil && !refreshed && hasStatus(err, http.StatusUnauthorized) && c.refreshToken() {
			refreshed = true
			err = c.attempt(ctx, method, target, payload, out)
		}
		return err
	})
	var ae *APIError
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && errors.As(err, &ae):
		return ae
	}
	return fmt.Errorf("%s %s: %w", method, path, err)
}

func (c *Client) attempt(ctx context.Context, method, target string, payload []byte, out any) error {
	h := http.Header{}
	if token := c.currentToken(); token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ans, err := c.call.Do(ctx, restcall.Request{Method: method, URL: target, Header: h, JSON: payload})
	if err != nil {
		return err
	}
	if ans.Status < 200 || ans.Status > 299 {
		return apiError(ans)
	}
	if out != nil {
		if err := json.Unmarshal(ans.Body, out); err != nil {
			return fmt.Errorf("decoding answer: %w", err)
		}
	}
	return nil
}

// apiError reads an error answer; one that is not an api.Error (a proxy's
// page) keeps its first bytes as details.
func apiError(ans restcall.Answer) *APIError {
	e := &APIError{Status: ans.Status}
	var body api.Error
	if json.Unmarshal(ans.Body, &body) == nil && (body.Class != "" || body.Details != "") {
		e.Code, e.Class, e.Details = body.Code, body.Class, body.Details
	} else {
		e.Code, e.Class = ans.Status, http.StatusText(ans.Status)
		e.Details = strings.TrimSpace(string(ans.Body[:min(len(ans.Body), 200)]))
	}
	if secs, err := strconv.Atoi(ans.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.retryAfter = min(time.Duration(secs)*time.Second, maxRetryAfter)
	}
	return e
}

// retryable: no answer, a server error, or "too many requests". A 4xx will
// answer the same next time.
func retryable(err error) bool {
	if restcall.IsNoAnswer(err) {
		return true
	}
	var ae *APIError
	return errors.As(err, &ae) && (ae.Status >= 500 || ae.Status == http.StatusTooManyRequests)
}

// retryAfter is the wait the inventory asked for, if any.
func retryAfter(err error) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.retryAfter
	}
	return 0
}

func (c *Client) currentToken() string {
	c.tokenMu.Lock()
	defer c.tokenMu.Unlock()
	return c.token
}

// refreshToken asks the TokenSource again; true when it gave a new token.
func (c *Client) refreshToken() bool {
	if c.source == nil {
		return false
	}
	t, err := c.source()
	if err != nil {
		c.log.Warn("reading the inventory token again after a 401", "err", err)
		return false
	}
	c.tokenMu.Lock()
	defer c.tokenMu.Unlock()
	if t == "" || t == c.token {
		return false
	}
	c.token = t
	c.log.Info("inventory token changed; using the new one")
	return true
}
