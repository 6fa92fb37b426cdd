package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"yunion.io/x/mps-daemon/pkg/atomicfile"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// LocalAdminName is the name of the admin token EnsureAdminTokenFile makes.
const LocalAdminName = "local-admin"

// EnsureAdminTokenFile makes the local default work with no manual step:
// path (the inventory's --admin-token-file) holds a valid admin token,
// readable by its owner (root) only, where climc and the daemon on this
// host look for it (host.conf's mps_inventory_token_file default).
//
// A file holding a token the database knows is left alone, whatever its
// role (an operator may have put another token there). A missing file is
// created (its directory too, mode 0700) with a new admin token named
// LocalAdminName; a file whose token the database does not know (the
// database was deleted or replaced, the token revoked) is rewritten with a
// new one, with a warning. The file is written whole (temporary file,
// fsync, rename), mode 0600, so no reader ever sees half a token. An empty
// path does nothing.
func EnsureAdminTokenFile(ctx context.Context, st *store.Store, path string, log *slog.Logger) error {
	if path == "" {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok, verr := st.VerifyToken(ctx, strings.TrimSpace(string(data)))
		if verr == nil {
			checkTokenFileMode(path, log)
			log.Info("admin token file in place", "file", path, "token_id", tok.ID, "role", tok.Role)
			return nil
		}
		if !errors.Is(verr, store.ErrInvalidToken) {
			return fmt.Errorf("checking the token in %s: %w", path, verr)
		}
		log.Warn("the admin token file holds no token this database knows (database replaced, or token revoked): writing a new admin token",
			"file", path)
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("creating the directory of the admin token file: %w", err)
		}
	default:
		return fmt.Errorf("reading the admin token file: %w", err)
	}

	whole, tok, err := st.CreateToken(ctx, store.NewToken{Name: LocalAdminName, Role: store.RoleAdmin})
	if err != nil {
		return fmt.Errorf("creating the local admin token: %w", err)
	}
	if err := writeSecretFile(path, whole+"\n"); err != nil {
		// Do not leave an admin token nobody has.
		if rerr := st.RevokeToken(context.WithoutCancel(ctx), tok.ID); rerr != nil {
			err = errors.Join(err, fmt.Errorf("revoking the unwritten token %s: %w", tok.ID, rerr))
		}
		return err
	}
	log.Info("wrote a new admin token", "file", path, "token_id", tok.ID, "name", LocalAdminName)
	return nil
}

// writeSecretFile replaces path with content, mode 0600, atomically.
func writeSecretFile(path, content string) error {
	if err := atomicfile.Write(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("the admin token file: %w", err)
	}
	return nil
}

// checkTokenFileMode warns when others than the owner may read the file: it
// is an admin token.
func checkTokenFileMode(path string, log *slog.Logger) {
	fi, err := os.Stat(path)
	if err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the admin token file is readable by others than its owner: chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
}
