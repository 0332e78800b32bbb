//go:build !linux

package kubetest

import "testing"

// Start skips the test: the cluster's kubelet, containerd and network run on Linux only.
func Start(t testing.TB) *Cluster {
	t.Helper()
	t.Skip("kubetest: the cluster runs on Linux only")
	return nil
}

// Stop does nothing where no cluster can start.
func Stop() error { return nil }

// Main runs the tests (no cluster starts here).
func Main(m *testing.M) int { return m.Run() }
