package javatrust

import (
	"os"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/testpki"
)

// The cost a run that intercepts (or has network.tls.caFile) now pays at start for Java's store,
// against what the /etc generation already did: reading the host's PEM bundle.
//
//	go test -run XXX -bench . ./internal/javatrust

const hostBundle = "/etc/ssl/certs/ca-certificates.crt"

// BenchmarkReadBundle is the baseline: the PEM bundle read, as sandbox/linux/etc.go:trustEntries does.
func BenchmarkReadBundle(b *testing.B) {
	for b.Loop() {
		if _, err := os.ReadFile(hostBundle); err != nil {
			b.Skip(err)
		}
	}
}

// BenchmarkBuild is the Java store from the host's cacerts plus one CA.
func BenchmarkBuild(b *testing.B) {
	if _, err := os.Stat(hostBundle); err != nil {
		b.Skip(err)
	}
	extra := testpki.NewCA(b, "bench CA").PEM
	for b.Loop() {
		if _, err := Build(HostStores, hostBundle, extra); err != nil {
			b.Fatal(err)
		}
	}
}
