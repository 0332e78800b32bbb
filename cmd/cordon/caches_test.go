//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheLayerHolds: the host's go module cache is shown inside (a module in it is read there), but
// what the agent writes into it, a new file or an existing module overwritten after a chmod (cache
// poisoning), stays in the run's layer: the host's cache is unchanged, the next run sees the host's
// content again, and the layer is gone when the run ends.
func TestCacheLayerHolds(t *testing.T) {
	requireTool(t, "go")
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	forEachIdentity(t, func(t *testing.T, h *harness) {
		modcache, gocache := filepath.Join(h.base, "modcache"), filepath.Join(h.base, "gocache")
		mod := filepath.Join(modcache, "example.test", "m@v1.0.0")
		h.writeFile(filepath.Join(mod, "m.go"), "package m // HOST-ORIGINAL\n", 0o444)
		h.writeFile(filepath.Join(gocache, "README"), "host build cache\n", 0o644)
		h.chownAll(h.base) // the caller's own cache, as go makes it
		os.Chmod(mod, 0o555)
		t.Cleanup(func() { os.Chmod(mod, 0o755) })
		// cordon's state reached through a symbolic link (a home on another disk, say): the layers'
		// paths are resolved before the backend opens them without following links.
		state := filepath.Join(h.base, "state-link")
		if err := os.Symlink(filepath.Join(h.home, ".local", "state"), state); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(h.home, ".local", "state"), 0o755)
		h.chownAll(h.base)
		env := []string{"PATH=" + filepath.Dir(goBin) + ":/usr/bin:/bin", "GOMODCACHE=" + modcache, "GOCACHE=" + gocache, "XDG_STATE_HOME=" + state}
		pol := h.policy("filesystem:\n  caches: [go]\n")
		script := `cat "$GOMODCACHE/example.test/m@v1.0.0/m.go"
chmod -R u+w "$GOMODCACHE/example.test" && echo 'package m // POISONED' > "$GOMODCACHE/example.test/m@v1.0.0/m.go"
echo planted > "$GOMODCACHE/planted.txt"; echo planted > "$GOCACHE/planted"
cat "$GOMODCACHE/example.test/m@v1.0.0/m.go" "$GOMODCACHE/planted.txt"`
		r := h.cordon(env, "", "run", "--keep", "--policy", pol, "--", "sh", "-c", script)
		if r.code != 0 || !strings.Contains(r.stdout, "HOST-ORIGINAL") {
			t.Fatalf("the host's module cache is not shown inside:\n%s", r)
		}
		if !strings.Contains(r.stdout, "POISONED") || !strings.Contains(r.stdout, "planted") {
			t.Fatalf("the writes inside did not take effect inside (the attack was not tried):\n%s", r)
		}
		if got := mustRead(t, filepath.Join(mod, "m.go")); got != "package m // HOST-ORIGINAL\n" {
			t.Errorf("the host's cached module was changed by the run: %q", got)
		}
		for _, p := range []string{filepath.Join(modcache, "planted.txt"), filepath.Join(gocache, "planted")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("a file written into the cache inside reached the host: %s", p)
			}
		}
		// The run is kept (--keep) but its cache layer is gone.
		layers, _ := filepath.Glob(filepath.Join(h.home, ".local", "state", "cordon", "runs", "*", "caches"))
		if len(layers) != 0 {
			t.Errorf("cache layers outlived the run: %v", layers)
		}
		// The next run starts from the host's cache again.
		r = h.cordon(env, "", "run", "--policy", pol, "--", "sh", "-c", `cat "$GOMODCACHE/example.test/m@v1.0.0/m.go"; ls "$GOMODCACHE"`)
		if r.code != 0 || !strings.Contains(r.stdout, "HOST-ORIGINAL") || strings.Contains(r.stdout, "planted") {
			t.Errorf("the next run does not see the host's cache as it is:\n%s", r)
		}
	})
}
