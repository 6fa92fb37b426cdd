package loopback

import "testing"

func TestAddress(t *testing.T) {
	for _, tt := range []struct{ listen, want string }{
		{"127.0.0.1:9331", "127.0.0.1:9331"},
		{"0.0.0.0:9331", "127.0.0.1:9331"},
		{":9331", "127.0.0.1:9331"},
		{"[::]:9330", "[::1]:9330"},
		{"[::1]:9330", "[::1]:9330"},
		{"10.1.2.3:9400", "10.1.2.3:9400"},
		{"node-1:9400", "node-1:9400"},
		{"", ""},
		{"9331", ""},
	} {
		t.Run(tt.listen, func(t *testing.T) {
			got, err := Address(tt.listen)
			if got != tt.want || (tt.want == "") != (err != nil) {
				t.Errorf("Address(%q) = %q, %v; want %q", tt.listen, got, err, tt.want)
			}
		})
	}
}
