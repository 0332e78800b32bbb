//go:build linux

package kubetest

import (
	"errors"
	"runtime/debug"
	"strings"
	"testing"
)

// TestCheckShim: which shim the cluster accepts for runsc, by its build information (in the text
// form `go version -m` prints, as the stock `go install gvisor.dev/gvisor/shim@V` and build-shim.sh
// record it) and by whether the machine refuses a negative oom_score_adj. The stock shim on a
// refusing machine is refused (every gVisor pod would fail), and so is the patched one on a machine
// that allows negative scores (the stock shim runs there unchanged).
func TestCheckShim(t *testing.T) {
	const v = "v0.0.0-20260905035102-160fafc42237"
	const other = "v0.0.0-20250101000000-000000000000"
	stock := func(version string) string {
		return "go\tgo1.26.8\npath\tgvisor.dev/gvisor/shim\nmod\tgvisor.dev/gvisor\t" + version + "\th1:AU5+CtCvnBnxdZRNcZt1NfSLqgkXZVT3N/u6u1aXg44=\n" +
			"dep\tgithub.com/containerd/containerd/v2\tv2.1.4\th1:x=\nbuild\tCGO_ENABLED=0\n"
	}
	patched := func(version string) string {
		return "go\tgo1.26.8\npath\t" + PatchedShimModule + "\nmod\t" + PatchedShimModule + "\t(devel)\t\n" +
			"dep\tgithub.com/containerd/containerd/v2\tv2.1.4\th1:x=\n" +
			"dep\tgvisor.dev/gvisor\t" + version + "\t\n=>\t../gvisor\t(devel)\t\nbuild\t-trimpath=true\nbuild\tCGO_ENABLED=0\n"
	}
	refused := errors.New("writing -999 to oom_score_adj: exit status 1: permission denied")
	for _, tc := range []struct {
		name    string
		bi      string
		oom     error
		patched bool
		err     string // a part of the error; "" for none
	}{
		{"stock where negative scores are allowed", stock(v), nil, false, ""},
		{"patched where they are refused", patched(v), refused, true, ""},
		{"stock where they are refused", stock(v), refused, false, "this machine refuses a negative oom_score_adj (writing -999"},
		{"patched where they are allowed", patched(v), nil, false, "the stock shim runs here unchanged"},
		{"stock of another version", stock(other), nil, false, "is of gVisor " + other + ", runsc of " + v},
		{"patched of another version", patched(other), refused, false, "is of gVisor " + other},
		{"runsc, not the shim", strings.Replace(stock(v), "gvisor.dev/gvisor/shim", "gvisor.dev/gvisor/runsc", 1), nil, false, "is not gVisor's containerd shim"},
		{"patched module without the replacement", strings.Replace(patched(v), "=>\t../gvisor\t(devel)\t\n", "", 1), refused, false, "is not gVisor's containerd shim"},
		{"something else", "go\tgo1.26.8\npath\texample/tool\nmod\texample/tool\t(devel)\t\n", refused, false, "is not gVisor's containerd shim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi, err := debug.ParseBuildInfo(tc.bi)
			if err != nil {
				t.Fatal(err)
			}
			got, err := checkShim("/x/"+shimName, bi, v, tc.oom)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			case got != tc.patched:
				t.Fatalf("patched %v, want %v", got, tc.patched)
			}
			// Every refusal says how to get the shim this machine needs.
			if err != nil {
				want := "gvisor.dev/gvisor/shim@" + v
				if tc.oom != nil {
					want = ShimBuildCommand + " " + v
				}
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v does not say how to get the shim (%q)", err, want)
				}
			}
		})
	}
}
