package main

import "yunion.io/x/mps-daemon/pkg/atomicfile"

// writeAddress writes the file whole, so a test polling for it never reads
// half an address.
func writeAddress(path, addr string) error {
	return atomicfile.Write(path, []byte(addr), 0o644)
}
