package mpsctl

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"yunion.io/x/mps-daemon/internal/testsupport/storetest"
	"yunion.io/x/mps-daemon/pkg/inventory/store"
)

// --paging-marker walks the list by marker: "" first, then the NextMarker
// of each footer, until a footer has none.
func TestIsolatedDeviceListPagingMarker(t *testing.T) {
	storetest.ForEachBackend(t, func(t *testing.T, open func() *store.Store) {
		t.Parallel()
		inv := newInventory(t, open())
		base := []string{"--url", inv.URL, "--token", inv.Token, "isolated-device-list", "--limit", "3"}
		next := regexp.MustCompile(`NextMarker: (\S+)`)
		var got, want []string
		for _, d := range inv.Devices {
			want = append(want, d.ID)
		}
		marker := ""
		for page := 0; ; page++ {
			r := runMpsctl(t, nil, append(slices.Clone(base), "--paging-marker", marker)...)
			if r.Code != ExitOK || page > len(inv.Devices) {
				t.Fatalf("page %d: exit %d\n%s%s", page, r.Code, r.Stdout, r.Stderr)
			}
			rows := tableRows(t, r.Stdout)
			for _, row := range rows {
				got = append(got, row["ID"])
			}
			m := next.FindStringSubmatch(footer(r.Stdout))
			wantFooter := fmt.Sprintf("*** Total: %d Field: seq Order: ASC", len(rows))
			if !strings.HasPrefix(footer(r.Stdout), wantFooter) || (m == nil) != (len(got) == len(want)) {
				t.Errorf("page %d footer %q, want it to start %q", page, footer(r.Stdout), wantFooter)
			}
			if m == nil {
				break
			}
			marker = m[1]
		}
		if !slices.Equal(got, want) {
			t.Errorf("walked %q\nwant   %q", got, want)
		}

		r := runMpsctl(t, nil, append(slices.Clone(base), "--paging-marker", "", "--offset", "2")...)
		if r.Code != ExitUsage || r.Stderr == "" {
			t.Errorf("--paging-marker with --offset: exit %d, stderr %q; want a usage error", r.Code, r.Stderr)
		}
	})
}
