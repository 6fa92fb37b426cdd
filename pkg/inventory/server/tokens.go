package server

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// LoadTokens reads the bearer tokens of a token file: one per line, blank
// lines and lines starting with # ignored, surrounding spaces trimmed. A
// file that yields no token is an error: an operator who gave one meant
// the API to be closed, and an empty list would leave it open.
func LoadTokens(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading token file: %w", err)
	}
	var tokens []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tokens = append(tokens, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading token file %s: %w", path, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("token file %s holds no token", path)
	}
	return tokens, nil
}
