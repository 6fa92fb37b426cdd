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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"yunion.io/x/mps-daemon/pkg/keystone"
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

// msgUsedByServer is the region's refusal to delete or purge a device a
// guest holds (api.ErrMsgIsolatedDeviceUsedByServer).
const msgUsedByServer = "Isolated device used by server"

func isUsedByServer(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && strings.Contains(ae.Details, msgUsedByServer)
}

func isNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

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
	reauthed := false
	for attempt := 0; ; attempt++ {
		tok, err := c.ks.Token(ctx)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		err = c.once(ctx, tok, method, path, query, payload, out)
		if err == nil {
			return nil
		}
		if refusedToken(err) && !reauthed {
			c.ks.Refused(tok)
			reauthed = true
			attempt--
			continue
		}
		if ctx.Err() != nil || !retryable(err) || attempt >= c.retries {
			return err
		}
		wait := keystone.Backoff(attempt)
		c.log.Debug("region call failed; retrying", "method", method, "path", path, "err", err, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(wait):
		}
	}
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
	return true // no answer
}

func (c *caller) once(ctx context.Context, tok, method, path string, query url.Values, payload []byte, out any) error {
	base, err := c.ks.Endpoint(ctx, ServiceType)
	if errors.Is(err, keystone.ErrNoEndpoint) {
		base, err = c.ks.Endpoint(ctx, "compute")
	}
	if err != nil {
		return err
	}
	target := base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return err
	}
	req.Header.Set("X-Auth-Token", tok)
	req.Header.Set("User-Agent", keystone.UserAgent)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Status: resp.StatusCode}
		_ = json.Unmarshal(data, ae)
		return fmt.Errorf("%s %s: %w", method, path, ae)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return nil
}
