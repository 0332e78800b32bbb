package services

import (
	"os"
	"testing"
)

// TestMain runs this test binary as the overlay helper when Start re-executes it (as cordon.Init
// does for cordon).
func TestMain(m *testing.M) {
	if len(os.Args) > 0 && os.Args[0] == MountArg0 {
		os.Exit(MountMain())
	}
	os.Exit(m.Run())
}
