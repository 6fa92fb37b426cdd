package main

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// checkServeFlags refuses serve flags the server cannot work with.
func checkServeFlags(f flags) error {
	if f.region == "" {
		return errors.New("--region: empty")
	}
	if f.keystoneTTL < time.Minute || f.keystoneTTL > 30*24*time.Hour {
		return fmt.Errorf("--keystone-token-ttl %s: must be between 1m and 720h", f.keystoneTTL)
	}
	if f.publicURL != "" {
		u, err := url.Parse(f.publicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--public-url %q: not an http(s) URL", f.publicURL)
		}
	}
	return nil
}
