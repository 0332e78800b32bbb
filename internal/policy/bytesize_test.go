package policy

import "testing"

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"1000000", 1000000, true},
		{"512MiB", 512 * MiB, true},
		{"2GiB", 2 * GiB, true},
		{"2 GiB", 2 * GiB, true},
		{"1K", KiB, true},
		{"3M", 3 * MiB, true},
		{"1G", GiB, true},
		{"1T", TiB, true},
		{"1KB", 1000, true},
		{"5MB", 5e6, true},
		{"2GB", 2e9, true},
		{"1TB", 1e12, true},
		{"7B", 7, true},
		{"8388607TiB", 8388607 * TiB, true},
		{"8388608TiB", 0, false},
		{"99999999999999999999", 0, false},
		{"", 0, false},
		{"GiB", 0, false},
		{"-1", 0, false},
		{"1.5GiB", 0, false},
		{"2 gigs", 0, false},
		{"1gib", 0, false},
		{"1  GiB", 0, false},
		{" 1GiB", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseByteSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	for b, want := range map[ByteSize]string{
		0: "0", 1000: "1000", KiB: "1KiB", 1536: "1536", 4 * GiB: "4GiB", 3 * TiB: "3TiB", 1025 * MiB: "1025MiB",
	} {
		if got := b.String(); got != want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(b), got, want)
		}
		if back, err := ParseByteSize(want); err != nil || back != b {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", want, back, err, int64(b))
		}
	}
}
