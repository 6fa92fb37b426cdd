package server

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// A list filter reads name=v first, then name.N in N's order (10 after 2),
// without empty values; a bad number or too many values is refused for
// that filter only; ignored parameters are named with their numbered keys.
func TestParseParams(t *testing.T) {
	raw := "dev_type.10=C&dev_type.2=B&dev_type=A&dev_type.3=&model=m" +
		"&addr.99999999999999999999=x&colour.0=red&colour.1=blue&scope=system&limit=5"
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := parseParams(q)
	for _, tt := range []struct {
		name    string
		want    []string
		wantErr string
	}{
		{"dev_type", []string{"A", "B", "C"}, ""},
		{"model", []string{"m"}, ""},
		{"vendor", nil, ""},
		{"addr", nil, "query parameter addr.99999999999999999999: not a list index"},
	} {
		got, err := p.list(tt.name)
		if !slices.Equal(got, tt.want) || fmt.Sprint(err) != fmt.Sprint(errOrNil(tt.wantErr)) {
			t.Errorf("list(%s) = %q, %v; want %q, %s", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
	known := append(slices.Clone(deviceQueryParams), "limit")
	if got, want := p.unknown(known), []string{"colour.0", "colour.1", "scope"}; !slices.Equal(got, want) {
		t.Errorf("unknown = %q, want %q", got, want)
	}

	many := url.Values{}
	for i := range maxListValues + 1 {
		many.Set(fmt.Sprintf("model.%d", i), "m")
	}
	if _, err := parseParams(many).list("model"); err == nil || !strings.Contains(err.Error(), "at most 100") {
		t.Errorf("%d values: %v, want a refusal naming the bound", maxListValues+1, err)
	}
}

func errOrNil(msg string) error {
	if msg == "" {
		return nil
	}
	return badInput("%s", msg)
}
