// Package region makes a Cloudpods region the daemon's inventory: it finds
// the host record Cloudpods keeps for this machine, learns which data model
// the region speaks for MPS devices, and keeps the host's MPS rows in step,
// written as Cloudpods' own host agent writes them, so that rows of either
// agent match. It is the region-side twin of pkg/inventory/client: the agent
// drives both through one interface (EnsureHost, SyncDevices).
//
// Facts about the region (field names, answers, the two data models) come
// from Cloudpods' source (master 2de2952 and release/4.0.3) and are checked
// against its real region in tests/e2e; docs/cloudpods.md sums them up.
package region

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/api"
	"yunion.io/x/mps-daemon/pkg/keystone"
	"yunion.io/x/mps-daemon/pkg/restcall"
)

// ServiceType is the catalog entry of the region's API: the one Cloudpods'
// host agent resolves (its compute modules are "compute_v2"); "compute" is
// the older name, tried when a catalog lacks it.
const ServiceType = "compute_v2"

// APIError is an error answer of the region: Cloudpods' {code, class,
// details}.
type APIError struct {
	Status  int    `json:"-"`
	Code    int    `json:"code"`
	Class   string `json:"class"`
	Details string `json:"details"`
}

func (e *APIError) Error() string {
	if e.Details != "" {
		return fmt.Sprintf("region answered %d %s: %s", e.Status, e.Class, e.Details)
	}
	return fmt.Sprintf("region answered %d %s", e.Status, http.StatusText(e.Status))
}

func isUsedByServer(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && strings.Contains(ae.Details, api.MsgDeviceUsedByServer) // the region refuses to delete or purge a held device
}

func isNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// maxAnswer bounds an answer of the region (a page of rows).
const maxAnswer = 32 << 20

// caller sends requests to the region with the keystone token.
type caller struct {
	ks      *keystone.Client
	http    *http.Client
	timeout time.Duration
	retries int
	log     *slog.Logger
}

// call sends one request, retrying what may succeed on another try (no
// answer, 5xx, 429) with backoff, and once with a new token after a 401.
// in is sent as JSON, the answer decoded into out (both optional).
func (c *caller) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var payload []byte
	if in != nil {
		var err error
		if payload, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
	}
	policy := keystone.RetryPolicy(c.retries, retryable, func(err error, wait time.Duration) {
		c.log.Debug("region call failed; retrying", "method", method, "path", path, "err", err, "retry_in", wait.String())
	})
	reauthed := false
	return restcall.Retry(ctx, policy, func() error {
		// keystone retries its own failures: one more round here would
		// multiply them.
		tok, err := c.ks.Token(ctx)
		if err != nil {
			return restcall.Permanent(fmt.Errorf("%s %s: %w", method, path, err))
		}
		err = c.once(ctx, tok, method, path, query, payload, out)
		if refusedToken(err) && !reauthed {
			c.ks.Refused(tok)
			reauthed = true
			if tok, err = c.ks.Token(ctx); err != nil {
				return restcall.Permanent(fmt.Errorf("%s %s: %w", method, path, err))
			}
			err = c.once(ctx, tok, method, path, query, payload, out)
		}
		return err
	})
}

// refusedToken reports an answer that means the region did not take the
// token: 401, or, as Cloudpods' region answers a revoked or expired token
// (it treats the request as anonymous), 403 "not enough privilege ...
// allow:none". One new token is tried; a real lack of rights fails again.
func refusedToken(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Status == http.StatusUnauthorized ||
		(ae.Status == http.StatusForbidden && strings.Contains(ae.Details, "allow:none"))
}

func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests
	}
	return restcall.IsNoAnswer(err)
}

func (c *caller) once(ctx context.Context, tok, method, path string, query url.Values, payload []byte, out any) error {
	base, err := c.ks.Endpoint(ctx, ServiceType)
	if errors.Is(err, keystone.ErrNoEndpoint) {
		base, err = c.ks.Endpoint(ctx, "compute")
	}
	if err != nil {
		return restcall.Permanent(err) // keystone has retried already
	}
	target := base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	call := restcall.Caller{HTTP: c.http, Timeout: c.timeout, MaxAnswer: maxAnswer}
	ans, err := call.Do(ctx, restcall.Request{Method: method, URL: target, JSON: payload,
		Header: http.Header{"X-Auth-Token": {tok}, "User-Agent": {keystone.UserAgent}}})
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if ans.Status/100 != 2 {
		ae := &APIError{Status: ans.Status}
		_ = json.Unmarshal(ans.Body, ae)
		return fmt.Errorf("%s %s: %w", method, path, ae)
	}
	data := ans.Body
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return nil
}
