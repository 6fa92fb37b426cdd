package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// writeAddress writes the file whole (temporary file, then rename), so a
// test polling for it never reads half an address.
func writeAddress(path, addr string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".address-*")
	if err != nil {
		return fmt.Errorf("writing address file: %w", err)
	}
	_, werr := tmp.WriteString(addr)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing address file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing address file %s: %w", path, err)
	}
	return nil
}
