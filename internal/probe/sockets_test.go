//go:build linux

package probe

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTrySocketsJudgesWhatOpened: a family that opens is a FAIL naming it, a family the kernel refuses
// is a PASS naming the errno. AF_UNIX always opens; family 46 is beyond every family Linux has.
func TestTrySocketsJudgesWhatOpened(t *testing.T) {
	unixTry := socketTry{"AF_UNIX stream", unix.AF_UNIX, unix.SOCK_STREAM, 0}
	missing := socketTry{"family 46", 46, unix.SOCK_STREAM, 0}
	tests := []struct {
		name     string
		tries    []socketTry
		want     Status
		evidence []string
	}{
		{"opens", []socketTry{unixTry}, Fail, []string{"opened AF_UNIX stream sockets", "why"}},
		{"refused", []socketTry{missing}, Pass, []string{"family 46: EAFNOSUPPORT"}},
		{"one of two opens", []socketTry{missing, unixTry}, Fail, []string{"opened AF_UNIX stream"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := trySockets(tt.tries, "why")
			if v.Status != tt.want {
				t.Fatalf("got %s (%s), want %s", v.Status, v.Evidence, tt.want)
			}
			for _, e := range tt.evidence {
				if !strings.Contains(v.Evidence, e) {
					t.Errorf("evidence %q lacks %q", v.Evidence, e)
				}
			}
		})
	}
}

// TestSocketTriesAreNotAllowedFamilies guards the lists against a family the sandbox keeps (a probe
// that tried AF_INET would fail everywhere) and against netlink protocols it keeps.
func TestSocketTriesAreNotAllowedFamilies(t *testing.T) {
	for _, s := range append(append(append([]socketTry{}, vsockTries...), familyTries...), netlinkTries...) {
		switch {
		case s.family == unix.AF_UNIX, s.family == unix.AF_INET6,
			s.family == unix.AF_INET && s.protocol != unix.IPPROTO_SMC,
			s.family == unix.AF_NETLINK && (s.protocol == unix.NETLINK_ROUTE || s.protocol == unix.NETLINK_SOCK_DIAG):
			t.Errorf("%s is something a sandbox keeps", s.name)
		}
	}
}
