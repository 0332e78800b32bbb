package cordon

import (
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
)

// newBackend is the box for an Isolation that check has accepted.
func newBackend(Isolation) sandbox.Backend { return &linux.Backend{} }
