package mountinfo

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestUnescape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/plain", "/plain"},
		{`/with\040space`, "/with space"},
		{`/tab\011and\012newline`, "/tab\tand\nnewline"},
		{`/back\134slash`, `/back\slash`},
		{`/cut\04`, `/cut\04`},
		{`/not\999octal`, `/not\999octal`},
		{`/end\`, `/end\`},
	} {
		if got := Unescape(tc.in); got != tc.want {
			t.Errorf("Unescape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestUnder reads a mountinfo of the test's own: escaped points are matched as the paths they are,
// a prefix that is not a directory of dir is not under it, and the deepest and the latest come first.
func TestUnder(t *testing.T) {
	f := filepath.Join(t.TempDir(), "mountinfo")
	lines := "" +
		"22 1 0:21 / / rw - ext4 /dev/sda rw\n" +
		"30 22 0:30 / /run/x rw - tmpfs tmpfs rw\n" +
		"31 30 0:31 / /run/x/a\\040b rw - tmpfs tmpfs rw\n" +
		"32 22 0:32 / /run/xy rw - tmpfs tmpfs rw\n" +
		"33 31 0:33 / /run/x/a\\040b/c rw - tmpfs tmpfs rw\n" +
		"34 30 0:34 / /run/x rw - tmpfs tmpfs rw\n"
	if err := os.WriteFile(f, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := under(r, "/run/x")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/run/x/a b/c", "/run/x/a b", "/run/x", "/run/x"}
	if !slices.Equal(got, want) {
		t.Errorf("under /run/x: %q, want %q", got, want)
	}
	if self, err := Under("/"); err != nil || !slices.Contains(self, "/") {
		t.Errorf("Under(/) of this process: %q, %v", self, err)
	}
}
