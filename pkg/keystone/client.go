// Package keystone is the part of a Keystone v3 client a Cloudpods host agent
// needs: password authentication of the admin user host.conf names, the
// token (sent as X-Auth-Token), renewed before it expires and after the
// service refuses it, and the service catalog that gives the region's URL.
// Cloudpods' own client (mcclient) is not importable here, so this is ours;
// the facts it rests on (field names, the catalog's shape, compute_v2) are
// read from Cloudpods' source and checked against its real keystone in
// tests/e2e.
//
// Secrets stay inside: no log line or error carries the password or a token.
package keystone

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"yunion.io/x/mps-daemon/pkg/restcall"
)

// Credentials are Cloudpods' host.conf keys for its own services' admin
// session (auth_url, admin_user, admin_password, admin_domain,
// admin_project, admin_project_domain, region, session_endpoint_type).
type Credentials struct {
	// AuthURL is keystone's v3 root, e.g. https://10.0.0.1:30357/v3.
	AuthURL       string
	User          string
	Password      string
	UserDomain    string
	Project       string
	ProjectDomain string
	// Region picks endpoints of the catalog; empty takes the only region.
	Region string
	// Interface is the endpoint type: internal (Cloudpods' default),
	// public or apigateway.
	Interface string
}

// Options configure a Client.
type Options struct {
	Credentials
	// HTTP is the client used (TLS set up by NewHTTPClient); its Timeout
	// should be 0: Timeout below bounds each attempt.
	HTTP *http.Client
	// Timeout bounds one authentication attempt; 0 means 10s.
	Timeout time.Duration
	// Retries is how often a failed authentication (no answer, 5xx) is
	// tried again, with backoff; 0 means 3, negative none.
	Retries int
	// RenewBefore: a token is renewed once it has less than this left;
	// 0 means 10 minutes (a tenth of the lifetime for short-lived tokens).
	RenewBefore time.Duration
	Log         *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// maxAnswer bounds a token's answer (its catalog included).
const maxAnswer = 8 << 20

// ErrUnauthorized: keystone refused the credentials (401), which no retry mends.
var ErrUnauthorized = errors.New("keystone refused the credentials")

// ErrNoEndpoint: the catalog has no endpoint of the service for the region
// and interface.
var ErrNoEndpoint = errors.New("no endpoint in the keystone catalog")

// Client holds one admin session; safe for concurrent use.
type Client struct {
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	token   string
	expires time.Time
	issued  time.Time
	catalog []service
}

// New checks the credentials and returns a client; it does not connect.
func New(o Options) (*Client, error) {
	if !restcall.IsHTTPURL(o.AuthURL) {
		return nil, fmt.Errorf("keystone auth_url %q: want http(s)://host[:port]/v3", o.AuthURL)
	}
	if o.User == "" || o.Password == "" {
		return nil, errors.New("keystone: admin_user and admin_password are required")
	}
	if o.Project == "" {
		return nil, errors.New("keystone: admin_project is required")
	}
	if o.UserDomain == "" {
		o.UserDomain = "Default"
	}
	if o.ProjectDomain == "" {
		o.ProjectDomain = "Default"
	}
	if o.Interface == "" {
		o.Interface = "internal"
	}
	o.HTTP, o.Timeout, o.Retries = restcall.Defaults(o.HTTP, o.Timeout, o.Retries)
	if o.RenewBefore <= 0 {
		o.RenewBefore = 10 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.AuthURL = strings.TrimRight(o.AuthURL, "/")
	return &Client{o: o, log: o.Log}, nil
}

// Token returns a token valid for a while yet: the current one, or a new one
// when there is none or it expires soon.
func (c *Client) Token(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" && !c.renewDue() {
		return c.token, nil
	}
	return c.authenticate(ctx)
}

// renewDue: less than RenewBefore (or a tenth of the lifetime, if shorter)
// is left. Called with mu held.
func (c *Client) renewDue() bool {
	before := c.o.RenewBefore
	if life := c.expires.Sub(c.issued); life > 0 && life/10 < before {
		before = life / 10
	}
	return c.o.Now().Add(before).After(c.expires)
}

// Refused tells the client that a service answered 401 to token: the next
// Token authenticates again (unless another caller already did).
func (c *Client) Refused(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token == token && token != "" {
		c.token = ""
		c.log.Warn("a service refused the keystone token; authenticating again")
	}
}

// Endpoint is the URL of serviceType (e.g. compute_v2) for the configured
// region and interface, from the catalog of the current token.
func (c *Client) Endpoint(ctx context.Context, serviceType string) (string, error) {
	if _, err := c.Token(ctx); err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return pickEndpoint(c.catalog, serviceType, c.o.Region, c.o.Interface)
}

// authenticate gets a new token, retrying what may succeed on another try
// (anything but a refusal of the credentials). Called with mu held.
func (c *Client) authenticate(ctx context.Context) (string, error) {
	var tok string
	err := restcall.Retry(ctx, RetryPolicy(c.o.Retries, func(err error) bool { return !errors.Is(err, ErrUnauthorized) },
		func(err error, wait time.Duration) {
			c.log.Warn("keystone authentication failed; retrying", "err", err, "retry_in", wait.String())
		}), func() error {
		var err error
		tok, err = c.authOnce(ctx)
		return err
	})
	if err != nil {
		return "", err
	}
	return tok, nil
}

// RetryPolicy is how a call to a Cloudpods service (keystone, the region)
// is retried: retries times, waiting 200ms doubled per retry up to 5s,
// jittered; retryable and notify as restcall.Policy's.
func RetryPolicy(retries int, retryable func(error) bool, notify func(error, time.Duration)) restcall.Policy {
	return restcall.Policy{Retries: retries, First: 200 * time.Millisecond, Max: 5 * time.Second, Retryable: retryable, Notify: notify}
}

// authRequest is keystone v3's password authentication body.
type authRequest struct {
	Auth struct {
		Identity struct {
			Methods  []string `json:"methods"`
			Password struct {
				User struct {
					Name     string `json:"name"`
					Domain   named  `json:"domain"`
					Password string `json:"password"`
				} `json:"user"`
			} `json:"password"`
		} `json:"identity"`
		Scope struct {
			Project struct {
				Name   string `json:"name"`
				Domain named  `json:"domain"`
			} `json:"project"`
		} `json:"scope"`
	} `json:"auth"`
}

type named struct {
	Name string `json:"name"`
}

// tokenAnswer is what is read of the answer's body.
type tokenAnswer struct {
	Token struct {
		ExpiresAt time.Time `json:"expires_at"`
		IssuedAt  time.Time `json:"issued_at"`
		Catalog   []service `json:"catalog"`
	} `json:"token"`
}

type service struct {
	Type      string     `json:"type"`
	Endpoints []endpoint `json:"endpoints"`
}

type endpoint struct {
	Interface string `json:"interface"`
	Region    string `json:"region"`
	RegionID  string `json:"region_id"`
	URL       string `json:"url"`
}

func (c *Client) authOnce(ctx context.Context) (string, error) {
	var body authRequest
	id := &body.Auth.Identity
	id.Methods = []string{"password"}
	id.Password.User.Name = c.o.User
	id.Password.User.Domain.Name = c.o.UserDomain
	id.Password.User.Password = c.o.Password
	body.Auth.Scope.Project.Name = c.o.Project
	body.Auth.Scope.Project.Domain.Name = c.o.ProjectDomain
	payload, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	target := c.o.AuthURL + "/auth/tokens"
	call := restcall.Caller{HTTP: c.o.HTTP, Timeout: c.o.Timeout, MaxAnswer: maxAnswer}
	ans, err := call.Do(ctx, restcall.Request{Method: http.MethodPost, URL: target, Header: http.Header{"User-Agent": {UserAgent}}, JSON: payload})
	if err != nil {
		return "", fmt.Errorf("authenticating with keystone %s: %w", target, err)
	}
	switch {
	case ans.Status == http.StatusUnauthorized || ans.Status == http.StatusForbidden:
		return "", fmt.Errorf("authenticating as %q in project %q with keystone %s: %d %s: %w",
			c.o.User, c.o.Project, target, ans.Status, http.StatusText(ans.Status), ErrUnauthorized)
	case ans.Status/100 != 2:
		return "", fmt.Errorf("authenticating with keystone %s: %d %s", target, ans.Status, http.StatusText(ans.Status))
	}
	tok := ans.Header.Get("X-Subject-Token")
	var answer tokenAnswer
	if err := json.Unmarshal(ans.Body, &answer); err != nil || tok == "" {
		return "", fmt.Errorf("authenticating with keystone %s: an answer without a token (not keystone v3?)", target)
	}
	now := c.o.Now()
	c.token, c.catalog = tok, answer.Token.Catalog
	c.issued, c.expires = now, answer.Token.ExpiresAt
	if !answer.Token.IssuedAt.IsZero() && answer.Token.ExpiresAt.After(answer.Token.IssuedAt) {
		// Lifetime from keystone's own clock; expiry on ours.
		c.expires = now.Add(answer.Token.ExpiresAt.Sub(answer.Token.IssuedAt))
	}
	if c.expires.IsZero() || !c.expires.After(now) {
		c.expires = now.Add(time.Hour) // no usable expiry: renew hourly
	}
	c.log.Info("authenticated with keystone", "auth_url", c.o.AuthURL, "user", c.o.User, "project", c.o.Project,
		"expires_in", c.expires.Sub(now).Round(time.Second).String())
	return tok, nil
}

// pickEndpoint finds the URL of serviceType for region and iface.
func pickEndpoint(catalog []service, serviceType, region, iface string) (string, error) {
	var regions []string
	for _, s := range catalog {
		if s.Type != serviceType {
			continue
		}
		var match []string
		for _, e := range s.Endpoints {
			if e.Interface != iface {
				continue
			}
			r := e.RegionID
			if r == "" {
				r = e.Region
			}
			regions = append(regions, r)
			if region == "" || r == region || e.Region == region {
				match = append(match, e.URL)
			}
		}
		if len(match) == 1 || (len(match) > 1 && region != "") {
			return strings.TrimRight(match[0], "/"), nil
		}
		if len(match) > 1 {
			return "", fmt.Errorf("%w: %s %s endpoints in several regions %v: set region in host.conf", ErrNoEndpoint, serviceType, iface, regions)
		}
	}
	return "", fmt.Errorf("%w: no %s endpoint of interface %s in region %q (found regions %v)", ErrNoEndpoint, serviceType, iface, region, regions)
}

// UserAgent is sent with every request: Cloudpods' services answer some
// routes (the region's /ping, /version) only to their own clients' agents.
const UserAgent = "yunioncloud-go/201708 (yunion-mps-daemon)"
