//go:build linux

package inpod

import (
	"os"
	"testing"
)

// TestMain lets the test binary be the agent's wrapper in a pid namespace of its own (see
// agentChild): the wrapper kills every process it can signal, which outside such a namespace would be
// every process of the machine the tests run as.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(agentChildMain())
	}
	os.Exit(m.Run())
}
