package cordon

import (
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
)

// newBackend is the box for an Isolation that check has accepted.
func newBackend(Isolation) sandbox.Backend { return &linux.Backend{} }

// serviceHostIDs are the host ids fixture servers run as when cordon runs as root: the id
// serviceRangeID of the reserved range the sandbox maps into (so that no account owns it), never the
// agent's own.
func serviceHostIDs() (uid, gid int, err error) {
	return linux.RootSandboxIDs(sandbox.User{UID: serviceRangeID, GID: serviceRangeID})
}
