package pci

import "testing"

func TestParseNormalisesCaseAndDomain(t *testing.T) {
	// Every spelling of the same function must compare equal: this is the
	// upper-case hex bug (Cloudpods issue 24931) that left bus 0x1a unmatched.
	want := Address{Domain: 0, Bus: 0x1a, Device: 0, Function: 0}
	for _, in := range []string{"00000000:1A:00.0", "0000:1a:00.0", "1a:00.0", "1A:00.0", "0:1a:0.0", " 0000:1A:00.0\n"} {
		t.Run(in, func(t *testing.T) {
			got, err := Parse(in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", in, err)
			}
			if got != want {
				t.Fatalf("Parse(%q) = %+v, want %+v", in, got, want)
			}
		})
	}
}

func TestFormats(t *testing.T) {
	a, err := Parse("00000001:DB:1F.7")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.String(); got != "0001:db:1f.7" {
		t.Errorf("String = %q", got)
	}
	if got := a.Short(); got != "db:1f.7" {
		t.Errorf("Short = %q", got)
	}
	if got := a.NVML(); got != "00000001:DB:1F.7" {
		t.Errorf("NVML = %q", got)
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{"", "1a", "1a:00", "zz:00.0", "1a:00.8", "1a:20.0", "123:00.0", "000000000:1a:00.0", "1a:00.00", "a:b:c:d.0"} {
		t.Run(in, func(t *testing.T) {
			if a, err := Parse(in); err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", in, a)
			}
		})
	}
}

func TestLess(t *testing.T) {
	a, _ := Parse("0000:1a:00.0")
	b, _ := Parse("0000:9a:00.0")
	if !a.Less(b) || b.Less(a) || a.Less(a) {
		t.Fatal("ordering by bus is wrong")
	}
}

func TestCompare(t *testing.T) {
	// Each pair differs in one field, the first address being the earlier;
	// the domain outranks the bus, the bus the device, the device the function.
	for _, tc := range [][2]string{
		{"0000:ff:1f.7", "0001:00:00.0"},
		{"0000:1a:1f.7", "0000:9a:00.0"},
		{"0000:1a:00.7", "0000:1a:01.0"},
		{"0000:1a:00.0", "0000:1a:00.1"},
	} {
		t.Run(tc[0]+" "+tc[1], func(t *testing.T) {
			a, _ := Parse(tc[0])
			b, _ := Parse(tc[1])
			if a.Compare(b) != -1 || b.Compare(a) != 1 || a.Compare(a) != 0 {
				t.Errorf("Compare: %d %d %d, want -1 1 0", a.Compare(b), b.Compare(a), a.Compare(a))
			}
		})
	}
}

// In JSON an address is its sysfs form, and any form reads back.
func TestTextForm(t *testing.T) {
	a := Address{Bus: 0x1a}
	b, err := a.MarshalText()
	if err != nil || string(b) != "0000:1a:00.0" {
		t.Fatalf("MarshalText = %q, %v", b, err)
	}
	var got Address
	if err := got.UnmarshalText([]byte("00000000:1A:00.0")); err != nil || got != a {
		t.Errorf("UnmarshalText = %+v, %v", got, err)
	}
	if err := got.UnmarshalText([]byte("nonsense")); err == nil {
		t.Error("UnmarshalText accepted nonsense")
	}
}
