package cordon_test

import (
	"os"
	"testing"

	"github.com/cordon-sandbox/cordon"
)

// TestMain lets the test binary serve as the sandbox's init, as every program that starts runs must.
func TestMain(m *testing.M) {
	cordon.Init()
	os.Exit(m.Run())
}
