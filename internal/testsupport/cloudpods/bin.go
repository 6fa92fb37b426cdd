package cloudpods

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// EnvBinCache names the directory the unpacked binaries are kept in
// (default: the user's cache directory, mps-ci/cloudpods-bin).
const EnvBinCache = "MPS_CLOUDPODS_BIN_CACHE"

// binaries are what scripts/cloudpods.sh runs from its BIN.
var binaries = []string{"keystone", "region", "climc"}

// unpackTimeout bounds unpacking the three binaries (about 5 s of CPU).
const unpackTimeout = 5 * time.Minute

// binDir returns a directory holding keystone, region and climc unpacked
// from dir/*.xz (or dir/bin/*.xz), for the script's BIN. They are unpacked once
// per machine (and per version of the .xz files: the directory is named
// after their sizes and times), under a lock, so that test processes
// running side by side unpack them once between them. Where dir/bin holds
// the binaries themselves, it is dir/bin.
func binDir(ctx context.Context, dir string) (string, error) {
	src := dir
	if fi, err := os.Stat(filepath.Join(dir, "bin")); err == nil && fi.IsDir() {
		src = filepath.Join(dir, "bin")
	}
	h := sha256.New()
	packed := false
	for _, b := range binaries {
		if fi, err := os.Stat(filepath.Join(src, b)); err == nil && fi.Mode()&0o111 != 0 {
			continue
		}
		fi, err := os.Stat(filepath.Join(src, b+".xz"))
		if err != nil {
			return "", fmt.Errorf("%w: no %s or %s.xz in %s", ErrUnavailable, b, b, src)
		}
		packed = true
		fmt.Fprintf(h, "%s %s %d %d\n", src, b, fi.Size(), fi.ModTime().UnixNano())
	}
	if !packed {
		return src, nil
	}
	root := os.Getenv(EnvBinCache)
	if root == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("the cache directory for Cloudpods' binaries: %w (set %s)", err, EnvBinCache)
		}
		root = filepath.Join(c, "mps-ci", "cloudpods-bin")
	}
	out := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(out+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil { // released by Close
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	if _, err := os.Stat(filepath.Join(out, ".complete")); err == nil {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, unpackTimeout)
	defer cancel()
	tmp := out + ".tmp." + strconv.Itoa(os.Getpid())
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	for _, b := range binaries {
		if err := unpack(ctx, src, tmp, b); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.RemoveAll(out); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("unpacking Cloudpods' binaries: %w", err)
	}
	return out, nil
}

// unpack writes the executable b into dst: a link to src/b when that is
// one, else src/b.xz uncompressed.
func unpack(ctx context.Context, src, dst, b string) error {
	if fi, err := os.Stat(filepath.Join(src, b)); err == nil && fi.Mode()&0o111 != 0 {
		return os.Symlink(filepath.Join(src, b), filepath.Join(dst, b))
	}
	f, err := os.OpenFile(filepath.Join(dst, b), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "xz", "-dc", "-T0", filepath.Join(src, b+".xz"))
	var stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	err = cmd.Run()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unpacking %s.xz: %w: %s", filepath.Join(src, b), err, stderr.String())
	}
	return nil
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if n := 4096 - len(l.b); n > 0 {
		l.b = append(l.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
