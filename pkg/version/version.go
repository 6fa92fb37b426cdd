// Package version holds the version stamped in at build time from git.
package version

// Version is set by the Makefile's -ldflags; "dev" for a plain go build.
var Version = "dev"
