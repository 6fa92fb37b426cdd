// Package restcall is how this project calls a JSON REST service: one
// exchange bounded in time and in the size of its answer (Caller.Do), and
// retries of what may succeed on another try, with exponential backoff and
// jitter (Retry, on github.com/cenkalti/backoff). The inventory client,
// the keystone client and the region client share it; each keeps its own
// error answers, authentication and idea of what is worth retrying.
package restcall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/cenkalti/backoff/v5"

	"yunion.io/x/mps-daemon/pkg/webtls"
)

// Request is one call: method, full URL, extra headers and a JSON body.
type Request struct {
	Method string
	URL    string
	// Header is added to the request (Accept and, with a body,
	// Content-Type are set here).
	Header http.Header
	// JSON is the body, sent as application/json; nil sends none.
	JSON []byte
}

// Answer is what came back, whatever its status.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// NoAnswerError is an exchange that brought no whole answer: the
// connection was refused or reset, the attempt's time ran out, or the
// answer was cut short. Another try may succeed.
type NoAnswerError struct{ Err error }

func (e *NoAnswerError) Error() string { return e.Err.Error() }
func (e *NoAnswerError) Unwrap() error { return e.Err }

// IsNoAnswer reports whether err is, or wraps, a NoAnswerError.
func IsNoAnswer(err error) bool {
	var na *NoAnswerError
	return errors.As(err, &na)
}

// ErrAnswerTooLarge: the answer is larger than Caller.MaxAnswer.
var ErrAnswerTooLarge = errors.New("answer too large")

// Caller sends requests with one HTTP client.
type Caller struct {
	HTTP *http.Client
	// Timeout bounds one exchange, reading the answer included.
	Timeout time.Duration
	// MaxAnswer bounds the answer's body in bytes.
	MaxAnswer int64
}

// Do sends r once and reads its answer. A connection refused for TLS (a
// certificate that does not verify, one side without TLS: another try
// fails the same) is a *webtls.RefusedError, its cause in words; another
// failed exchange is a *NoAnswerError; an answer of any status is an
// Answer and no error.
func (c Caller) Do(ctx context.Context, r Request) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var body io.Reader
	if r.JSON != nil {
		body = bytes.NewReader(r.JSON)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, body)
	if err != nil {
		return Answer{}, fmt.Errorf("building the request: %w", err)
	}
	for k, vs := range r.Header {
		req.Header[k] = append([]string(nil), vs...)
	}
	req.Header.Set("Accept", "application/json")
	if r.JSON != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if refused := webtls.Refusal(err, ""); refused != nil {
			return Answer{}, refused
		}
		return Answer{}, &NoAnswerError{err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.MaxAnswer+1))
	if err != nil {
		return Answer{}, &NoAnswerError{fmt.Errorf("reading the answer: %w", err)}
	}
	if int64(len(b)) > c.MaxAnswer {
		return Answer{}, fmt.Errorf("%w: more than %d bytes (status %d)", ErrAnswerTooLarge, c.MaxAnswer, resp.StatusCode)
	}
	if refused := webtls.PlainToTLS(resp.StatusCode, b); refused != nil {
		return Answer{}, refused
	}
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// IsHTTPURL reports whether raw is an http:// or https:// URL with a host:
// what every service URL in host.conf must be.
func IsHTTPURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// Defaults fills what a caller left unset: a plain HTTP client, 10s per
// attempt, 3 retries (a negative count: none). The inventory client,
// keystone and the region client take the same.
func Defaults(httpc *http.Client, timeout time.Duration, retries int) (*http.Client, time.Duration, int) {
	if httpc == nil {
		httpc = &http.Client{}
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	switch {
	case retries == 0:
		retries = 3
	case retries < 0:
		retries = 0
	}
	return httpc, timeout, retries
}

// Policy says how a call is retried.
type Policy struct {
	// Retries is how many tries may follow the first; 0 none.
	Retries int
	// First is the first wait, doubled after each retry up to Max; each
	// wait is drawn from [w/2, 3w/2], so callers that failed together do
	// not come back together.
	First, Max time.Duration
	// Retryable says whether an error may go away on another try; nil
	// retries every error.
	Retryable func(error) bool
	// After is a wait the service asked for (Retry-After), used when it is
	// longer than the backoff's; nil for none.
	After func(error) time.Duration
	// Notify is told of each failure that will be retried; nil for none.
	Notify func(err error, wait time.Duration)
}

// Permanent marks an error of op that no retry mends, whatever the
// policy says of it; Retry returns the error itself.
func Permanent(err error) error { return backoff.Permanent(err) }

// Retry runs op until it succeeds, fails with an error not worth
// retrying, the retries are spent or ctx ends, and returns op's last error
// (joined with ctx's when ctx ended).
func Retry(ctx context.Context, p Policy, op func() error) error {
	var last error
	waits := &paced{
		exp:   &backoff.ExponentialBackOff{InitialInterval: p.First, RandomizationFactor: 0.5, Multiplier: 2, MaxInterval: p.Max},
		after: p.After,
		last:  &last,
	}
	opts := []backoff.RetryOption{
		backoff.WithBackOff(waits),
		backoff.WithMaxTries(uint(max(p.Retries, 0)) + 1),
		backoff.WithMaxElapsedTime(0),
	}
	if p.Notify != nil {
		opts = append(opts, backoff.WithNotify(p.Notify))
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		last = op()
		if last != nil && p.Retryable != nil && !p.Retryable(last) {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	}, opts...)
	if err == nil {
		return nil
	}
	if last == nil {
		return err
	}
	var perm *backoff.PermanentError
	if errors.As(last, &perm) {
		last = perm.Err
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(last, ctxErr) {
		return errors.Join(ctxErr, last)
	}
	return last
}

// paced is the exponential backoff, lengthened to what the service asked
// for after the last error.
type paced struct {
	exp   *backoff.ExponentialBackOff
	after func(error) time.Duration
	last  *error
}

func (p *paced) Reset() { p.exp.Reset() }

func (p *paced) NextBackOff() time.Duration {
	d := p.exp.NextBackOff()
	if p.after != nil && *p.last != nil {
		d = max(d, p.after(*p.last))
	}
	return d
}
