//go:build !linux

package cordon

import "github.com/cordon-sandbox/cordon/internal/sandbox"

// newBackend is the box for an Isolation that check has accepted: none on this platform, whose
// Launch says so (ErrUnsupported).
func newBackend(Isolation) sandbox.Backend { return sandbox.Unsupported{} }

// serviceHostIDs has no reserved range to pick from on this platform.
func serviceHostIDs() (uid, gid int, err error) {
	return 0, 0, ErrUnsupported
}
