package server

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadTokens(t *testing.T) {
	tests := []struct {
		file    string
		want    []string
		wantErr string
	}{
		{"two.txt", []string{"agent-gpu-1", "climc-token"}, ""},
		{"crlf.txt", []string{"only"}, ""},
		{"none.txt", nil, "holds no token"},
		{"missing.txt", nil, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := LoadTokens(filepath.Join("testdata", "tokens", tt.file))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LoadTokens = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
