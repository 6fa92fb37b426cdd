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
	body := fmt.Sprintf(`{"auth":{"identity":{"methods":["password"],"password":{"user":{"name":%q,"domain":{"name":%q},"password":%q}}},"scope":{"project":{"name":%q,"domain":{"name":%q}}}}}`,
		c.User, c.Domain, c.Password, c.Project, c.Domain)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.AuthURL, "/")+"/auth/tokens", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	tok := resp.Header.Get("X-Subject-Token")
	if resp.StatusCode/100 != 2 || tok == "" {
		return "", fmt.Errorf("keystone answered %s without a token", resp.Status)
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
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.RegionURL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-Auth-Token", tok)
	req.Header.Set("Content-Type", "application/json")
	// The region's default handlers answer only its own clients' user agent.
	req.Header.Set("User-Agent", "yunioncloud-go/201708")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
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
