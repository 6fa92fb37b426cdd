package cloudpods

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Token returns a fresh keystone token of the admin user, scoped to its
// project, from POST /v3/auth/tokens.
func (c *Cloud) Token(ctx context.Context) (string, error) {
	return Login(ctx, c.Endpoint())
}

// Login authenticates at ep's keystone (POST /v3/auth/tokens, the password
// method, scoped to ep's project) and returns X-Subject-Token: what
// Cloudpods' clients do before any call.
func Login(ctx context.Context, ep Endpoint) (string, error) {
	body := map[string]any{"auth": map[string]any{
		"identity": map[string]any{"methods": []string{"password"}, "password": map[string]any{
			"user": map[string]any{"name": ep.User, "domain": map[string]any{"name": ep.Domain}, "password": ep.Password}}},
		"scope": map[string]any{"project": map[string]any{"name": ep.Project, "domain": map[string]any{"name": ep.Domain}}},
	}}
	hdr, err := Request(ctx, http.MethodPost, strings.TrimSuffix(ep.AuthURL, "/")+"/auth/tokens", "", body, nil)
	if err != nil {
		return "", err
	}
	tok := hdr.Get("X-Subject-Token")
	if tok == "" {
		return "", fmt.Errorf("keystone at %s answered without a token", ep.AuthURL)
	}
	return tok, nil
}

// Call sends one request to the region as the admin user: body (when not
// nil) is sent as JSON, the answer's JSON is decoded into out (when not
// nil). An answer that is not 2xx is an error carrying its body.
func (c *Cloud) Call(ctx context.Context, method, path string, body, out any) error {
	tok, err := c.Token(ctx)
	if err != nil {
		return err
	}
	_, err = Request(ctx, method, strings.TrimSuffix(c.RegionURL, "/")+path, tok, body, out)
	return err
}

// Request sends one request as Cloudpods' clients send it: body (when not
// nil) as JSON, Content-Type application/json, the token (when not empty)
// in X-Auth-Token, their user agent (the region's default handlers answer
// no other). The answer's JSON is decoded into out (when not nil) and its
// headers returned; an answer that is not 2xx is an error carrying its
// body.
func Request(ctx context.Context, method, url, token string, body, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "yunioncloud-go/201708")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, &HTTPError{Method: method, URL: url, Status: resp.Status, Code: resp.StatusCode, Body: b}
	}
	if out != nil {
		return resp.Header, json.Unmarshal(b, out)
	}
	return resp.Header, nil
}

// HTTPError is an answer that is not 2xx.
type HTTPError struct {
	Method, URL, Status string
	Code                int
	Body                []byte
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.URL, e.Status, e.Body)
}

// HostCreateBody is the body of POST /zones/<zone>/hosts for a host record
// of host_type container, shaped as Cloudpods' host agent sends it at its
// first start (pkg/hostman/hostinfo updateOrCreateHost).
func HostCreateBody(name, mac, ip string) map[string]any {
	return map[string]any{"host": map[string]any{
		"name": name, "hostname": name, "access_ip": ip, "access_mac": mac,
		"manager_uri": "http://" + ip + ":8885", "host_type": "container",
		"cpu_count": 16, "node_count": 1, "cpu_desc": "test cpu", "cpu_mhz": 2400, "cpu_cache": "32768",
		"mem_size": "131072", "mem_reserved": "4096", "page_size_kb": 4,
		"storage_driver": "Linux", "storage_type": "rotate", "storage_size": 1048576, "sys_info": map[string]any{},
	}}
}

// CreateHost creates a host record of host_type container in the zone, as
// Cloudpods' host agent does at its first start, and returns its id.
func (c *Cloud) CreateHost(ctx context.Context, name, mac, ip string) (string, error) {
	body := HostCreateBody(name, mac, ip)
	var out struct {
		Host struct {
			ID string `json:"id"`
		} `json:"host"`
	}
	if err := c.Call(ctx, http.MethodPost, "/zones/"+c.ZoneID+"/hosts", body, &out); err != nil {
		return "", fmt.Errorf("creating host %s: %w", name, err)
	}
	if out.Host.ID == "" {
		return "", fmt.Errorf("creating host %s: no id in the answer", name)
	}
	return out.Host.ID, nil
}
