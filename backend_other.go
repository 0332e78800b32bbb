//go:build !linux

package cordon

import "github.com/cordon-sandbox/cordon/internal/sandbox"

// newBackend is the box for an Isolation that check has accepted: none on this platform, whose
// Launch says so.
func newBackend(Isolation, string, []string, []string) (sandbox.Backend, error) {
	return sandbox.Unsupported{}, nil
}

// FindRunsc reports that this platform has no gVisor tier.
func FindRunsc(string, []string) (path, version string, err error) {
	return "", "", sandbox.ErrUnsupported
}

// serviceHostIDs has no reserved range to pick from on this platform.
func serviceHostIDs() (uid, gid int, err error) {
	return 0, 0, ErrUnsupported
}
