//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The in-pod subcommands from the command line: the startup probe says yes only once the ready file
// is there, the gateway refuses to run as any uid but the one the redirect exempts (its own
// connections would come back to it), setup refuses a uid it cannot exempt before it touches
// anything, and a mistake is one line and status 2. (They run for real, in a test pod, in
// internal/kube/inpod.)
func TestKubeInPod(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		dir := filepath.Join(h.base, "trust")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if r := h.cordon(nil, "", "kube", "ready", "--dir", dir); r.code != 1 || !strings.Contains(r.stderr, "not ready") {
			t.Errorf("ready without a ready file:\n%s", r)
		}
		h.writeFile(filepath.Join(dir, "ready"), "", 0o644)
		if r := h.cordon(nil, "", "kube", "ready", "--dir", dir); r.code != 0 || r.stderr != "" {
			t.Errorf("ready with a ready file:\n%s", r)
		}
		if r := h.cordon(nil, "", "kube", "gateway", "--config", filepath.Join(h.base, "none.json")); r.code != 1 || !strings.Contains(r.stderr, "runs as uid 15000") {
			t.Errorf("gateway as uid %d:\n%s", h.who.uid, r)
		}
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"kube", "setup", "--gateway-uid", "0"}, "--gateway-uid 0 is not a uid"},
			{[]string{"kube", "setup", "--gateway-uid", "4294967296"}, "--gateway-uid 4294967296 is not a uid"},
			{[]string{"kube", "setup", "extra"}, "kube setup: takes no arguments"},
			{[]string{"kube", "gateway", "--bogus"}, "kube gateway: unknown flag --bogus"},
			{[]string{"kube", "ready", "a", "b"}, "kube ready: takes no arguments"},
		} {
			r := h.cordon(nil, "", tc.args...)
			if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("%v: want one line with %q and exit %d:\n%s", tc.args, tc.want, exitUsage, r)
			}
		}
	})
}

// kubeInPod takes its own three subcommands and leaves every other name to the rest of cordon kube.
func TestKubeInPodTakesItsOwn(t *testing.T) {
	for _, name := range []string{"clone", "agent", "keep", "fetch", "render", "bogus"} {
		a, _, _ := kubeApp(t)
		if _, handled := a.kubeInPod(name, nil); handled {
			t.Errorf("kube %s was taken by the in-pod side", name)
		}
	}
	for _, name := range []string{"setup", "gateway", "ready"} {
		a, _, _ := kubeApp(t)
		if _, handled := a.kubeInPod(name, []string{"--bogus"}); !handled {
			t.Errorf("kube %s was not taken by the in-pod side", name)
		}
	}
}
