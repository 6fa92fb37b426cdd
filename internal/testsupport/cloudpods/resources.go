package cloudpods

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// What tests need in the region beyond what cloudpods-up.sh makes: a device
// model that defines a dev_type, guests settled after an attach or detach
// (guest.go makes them), and the real climc pointed at another endpoint (an
// mps-inventory).

// CreateDeviceModel registers an isolated-device model, which is what lets
// this region (Cloudpods' master) take rows of a dev_type it does not know,
// such as NVIDIA_MPS: `climc isolated-device-model-create`. A model that is
// registered already (same name, or same vendor and device id) is left as
// it is.
func (c *Cloud) CreateDeviceModel(ctx context.Context, model, devType, vendorID, deviceID string) error {
	body := map[string]any{"isolated_device_model": map[string]any{
		"model": model, "dev_type": devType, "vendor_id": vendorID, "device_id": deviceID,
		"disable_auto_detect": true, "hot_pluggable": false,
	}}
	err := c.Call(ctx, http.MethodPost, "/isolated_device_models", body, nil)
	if err != nil && strings.Contains(err.Error(), "has been registered") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating isolated device model %s: %w", model, err)
	}
	return nil
}

// DeleteDeviceModel removes the isolated-device models named model, as
// `climc isolated-device-model-delete` does; the region refuses while
// devices of the model are held. None of that name is no error.
func (c *Cloud) DeleteDeviceModel(ctx context.Context, model string) error {
	var l struct {
		Models []struct {
			ID    string `json:"id"`
			Model string `json:"model"`
		} `json:"isolated_device_models"`
	}
	if err := c.Call(ctx, http.MethodGet, "/isolated_device_models?scope=system&limit=0", nil, &l); err != nil {
		return fmt.Errorf("listing isolated device models: %w", err)
	}
	for _, m := range l.Models {
		if m.Model != model {
			continue
		}
		if err := c.Call(ctx, http.MethodDelete, "/isolated_device_models/"+m.ID, nil, nil); err != nil {
			return fmt.Errorf("deleting isolated device model %s (%s): %w", model, m.ID, err)
		}
	}
	return nil
}

// guestID is what a guest id may be here (it goes into SQL text).
var guestID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,35}$`)

// SettleGuest waits for the tasks an attach or detach started on guest (its
// id or name) to end, then marks the guest ready again. Each attach and
// detach starts a task that asks the guest's host agent to apply the
// change; with no host agent listening it fails (the guest becomes
// sync_isolated_device_failed, and the region refuses further attaches),
// where a host agent would have applied it and left the guest ready. The
// devices' rows are as the attach or detach left them either way.
func (c *Cloud) SettleGuest(ctx context.Context, guest string) error {
	var s struct {
		Server struct{ ID string } `json:"server"`
	}
	if err := c.Call(ctx, http.MethodGet, "/servers/"+guest, nil, &s); err != nil {
		return err
	}
	id := s.Server.ID
	if !guestID.MatchString(id) {
		return fmt.Errorf("guest %s: id %q is not one", guest, id)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		n, err := c.sql(ctx, "yunioncloud", fmt.Sprintf(
			"SELECT COUNT(*) FROM tasks_tbl WHERE obj_id = '%s' AND stage NOT IN ('complete', 'failed')", id))
		if err != nil {
			return err
		}
		if n == "0" {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tasks of guest %s did not end: %w", guest, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return c.Call(ctx, http.MethodPost, "/servers/"+id+"/status", map[string]any{"server": map[string]any{"status": "ready"}}, nil)
}

// sql runs one statement on the control plane's MariaDB as root, through
// its socket, and returns the first column of the first row ("" for none).
func (c *Cloud) sql(ctx context.Context, database, stmt string) (string, error) {
	if c.replay != nil {
		return "", errReplay("SQL on the region's database")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sock := filepath.Join(c.Work, "mysql", "run", "mysqld.sock")
	out, err := exec.CommandContext(ctx, "mariadb", "--no-defaults", "-S", sock, "-uroot", "-N", "-B", database, "-e", stmt).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mariadb %s: %w: %s", database, err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	first, _, _ = strings.Cut(first, "\t")
	return strings.TrimSpace(first), nil
}

// Endpoint is what the real climc reads to find a keystone and a region:
// the OS_* variables.
type Endpoint struct {
	AuthURL, User, Password, Project, Domain, Region string
}

// Endpoint is this control plane's, as the admin user.
func (c *Cloud) Endpoint() Endpoint {
	return Endpoint{AuthURL: c.AuthURL, User: c.User, Password: c.Password, Project: c.Project, Domain: c.Domain, Region: c.RegionName}
}

// RunClimcAt runs the real climc against ep (an mps-inventory's keystone
// face, say) and returns what it printed and its exit status. climc keeps
// the token it got in $TMPDIR: it runs with TMPDIR set to tmp (when not
// empty). Only its garbage collector is tuned (GOGC, GOMEMLIMIT): what it
// sends and prints is the same.
func (c *Cloud) RunClimcAt(ctx context.Context, ep Endpoint, tmp string, args ...string) (stdout, stderr string, code int, err error) {
	if c.Climc == "" {
		return "", "", -1, errReplay("climc " + strings.Join(args, " "))
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Climc, args...)
	cmd.Env = append(os.Environ(),
		"OS_AUTH_URL="+ep.AuthURL, "OS_USERNAME="+ep.User, "OS_PASSWORD="+ep.Password,
		"OS_PROJECT_NAME="+ep.Project, "OS_REGION_NAME="+ep.Region,
		"OS_DOMAIN_NAME="+ep.Domain, "OS_PROJECT_DOMAIN="+ep.Domain,
		// climc is a short-lived program whose start (registering its
		// thousands of commands) is most of what a call costs; its
		// garbage collection then is pure overhead, about a quarter of
		// the call's CPU (0.45 against 0.6 s here). The tests make
		// hundreds of calls on a 2-core machine. The limit bounds a call
		// that would allocate a lot (it then collects as usual).
		"GOGC=off", "GOMEMLIMIT=1GiB")
	if tmp != "" {
		cmd.Env = append(cmd.Env, "TMPDIR="+tmp)
	}
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return o.String(), e.String(), -1, fmt.Errorf("running climc %s: %w", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), 0, nil
}
