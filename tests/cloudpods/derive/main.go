// Command derive turns recordings of a real Cloudpods keystone and region
// (JSON lines, as the recording proxy writes them) into the cassettes the
// replay tests read, under tests/cloudpods/recordings:
//
//	go run ./tests/cloudpods/derive -from DIR
//
// DIR holds the recordings named below: make test-cloudpods writes one a
// test package (docs/cloudpods.md, "Recordings"); the first ones came from
// a recording proxy of their own. Each cassette is one test's exchanges,
// normalised (internal/testsupport/replay).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"yunion.io/x/mps-daemon/internal/testsupport/replay"
)

// source is a recording and where its cassettes go.
type source struct {
	replay.Source
	dir string
}

// sources: what each recording holds and how it is cut. The first
// recordings (Cloudpods master 2de295222d, 2026-11-27) carry no test
// markers: they are cut at the first line of each test.
var sources = []source{
	{replay.Source{File: "region-backend-tests.jsonl", What: "go test ./pkg/region against Cloudpods master 2de295222d", Splits: []replay.Split{
		{Name: "TestModelProbeTellsColumnsApart", Line: 112},
		{Name: "TestRefusedTokenNeverReadsAsAnEmptyList", Line: 117},
		{Name: "TestWrongPasswordFailsOnceWithoutTheSecret", Line: 130},
		{Name: "TestHostRecordFoundByMACNeverDuplicated", Line: 131},
		{Name: "TestCreateHostOnlyWhenAsked", Line: 141},
		{Name: "TestGPURowsResizeAndHeld", Line: 147},
		{Name: "TestPerSliceRowsRefusedThenAcceptedWithADeviceModel", Line: 198},
	}}, "region"},
	{replay.Source{File: "daemon-joins-region.jsonl", What: "mps-daemon --simulate 8xH100 with only Cloudpods' keys in host.conf, and climc, against Cloudpods master 2de295222d",
		Names: []string{"TestDaemonWaitsForTheRecordedHostRecord", "TestDaemonWithAWrongPasswordAgainstTheRecordedKeystone", "TestDaemonJoinsTheRecordedRegion"}}, "e2e"},
	{replay.Source{File: "daemon-e2e.jsonl", What: "go test -run Cloudpods ./tests/e2e against Cloudpods master 2de295222d", Splits: []replay.Split{
		{Name: "TestCloudpodsRegion", Line: 113},
	}}, "e2e"},
	{replay.Source{File: "climc-regioncompat.jsonl", What: "go test ./tests/regioncompat (Cloudpods' climc and the test's requests) against Cloudpods master 2de295222d", Splits: []replay.Split{
		{Name: "TestRealClimcAgainstTheInventory", Line: 113},
	}}, "regioncompat"},
	// What make test-cloudpods records (one file a package, a marker where
	// each test begins): cut by test.
	{replay.Source{File: "region.jsonl", What: "go test ./pkg/region against a real Cloudpods (make test-cloudpods)"}, "region"},
	{replay.Source{File: "e2e.jsonl", What: "go test ./tests/e2e (its Cloudpods tests) against a real Cloudpods (make test-cloudpods)"}, "e2e"},
	{replay.Source{File: "regioncompat.jsonl", What: "go test ./tests/regioncompat against a real Cloudpods (make test-cloudpods)"}, "regioncompat"},
}

func main() {
	from := flag.String("from", "", "the directory of the recordings")
	to := flag.String("to", "tests/cloudpods/recordings", "where the cassettes go")
	flag.Parse()
	if *from == "" {
		fmt.Fprintln(os.Stderr, "derive: -from DIR is required")
		os.Exit(2)
	}
	if err := deriveAll(*from, *to, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "derive:", err)
		os.Exit(1)
	}
}

// deriveAll writes the cassettes of every recording in from under to,
// saying on out what it wrote and which recordings it did not find.
func deriveAll(from, to string, out io.Writer) error {
	for _, s := range sources {
		src := s.Source
		src.File = filepath.Join(from, s.File)
		if _, err := os.Stat(src.File); err != nil {
			fmt.Fprintf(out, "no %s: skipped\n", s.File)
			continue
		}
		cs, err := replay.Derive(src)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(cs))
		for n := range cs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			path := filepath.Join(to, s.dir, n+".json")
			if err := cs[n].Save(path); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s: %s\n", path, cs[n].Describe())
		}
	}
	return nil
}
