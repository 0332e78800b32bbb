package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLocate(t *testing.T) {
	home := t.TempDir()
	xdg := t.TempDir()
	explicit := filepath.Join(t.TempDir(), "p.yaml")
	writeFile(t, explicit)
	homePolicy := filepath.Join(home, ".config", "cordon", "policy.yaml")
	xdgPolicy := filepath.Join(xdg, "cordon", "policy.yaml")

	user := LocateEnv{UID: 1000, Home: home}
	if got, err := Locate("", user); err != nil || got != "" {
		t.Errorf("no file: Locate = %q, %v; want \"\", nil", got, err)
	}
	writeFile(t, homePolicy)
	if got, err := Locate("", user); err != nil || got != homePolicy {
		t.Errorf("home: Locate = %q, %v; want %q", got, err, homePolicy)
	}
	withXDG := LocateEnv{UID: 1000, Home: home, XDGConfigHome: xdg}
	if got, err := Locate("", withXDG); err != nil || got != "" {
		t.Errorf("XDG set, no file there: Locate = %q, %v; want \"\" (XDG replaces ~/.config)", got, err)
	}
	writeFile(t, xdgPolicy)
	if got, err := Locate("", withXDG); err != nil || got != xdgPolicy {
		t.Errorf("XDG: Locate = %q, %v; want %q", got, err, xdgPolicy)
	}
	relXDG := LocateEnv{UID: 1000, Home: home, XDGConfigHome: "rel/dir"}
	if got, err := Locate("", relXDG); err != nil || got != homePolicy {
		t.Errorf("relative XDG is ignored: Locate = %q, %v; want %q", got, err, homePolicy)
	}
	if got, err := Locate(explicit, withXDG); err != nil || got != explicit {
		t.Errorf("explicit: Locate = %q, %v; want %q", got, err, explicit)
	}
	if _, err := Locate(filepath.Join(home, "missing.yaml"), withXDG); err == nil {
		t.Error("explicit missing file: Locate succeeded, want an error")
	}
	if _, err := Locate(home, withXDG); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("explicit directory: Locate = %v, want an is-a-directory error", err)
	}
	if got, err := Locate("", LocateEnv{UID: 1000}); err != nil || got != "" {
		t.Errorf("no home: Locate = %q, %v; want \"\", nil", got, err)
	}

	// Root never reads a user's config.
	got, err := Locate("", LocateEnv{UID: 0, Home: home, XDGConfigHome: xdg})
	if _, statErr := os.Stat(SystemPolicyPath); statErr == nil {
		if err != nil || got != SystemPolicyPath {
			t.Errorf("root: Locate = %q, %v; want %q", got, err, SystemPolicyPath)
		}
	} else if err != nil || got != "" {
		t.Errorf("root without %s: Locate = %q, %v; want \"\"", SystemPolicyPath, got, err)
	}

	// A directory where the file should be is an error, not "no policy".
	other := t.TempDir()
	if err := os.MkdirAll(filepath.Join(other, "cordon", "policy.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Locate("", LocateEnv{UID: 1000, XDGConfigHome: other}); err == nil {
		t.Error("directory at the policy path: Locate succeeded, want an error")
	}
}

func TestCheckOutside(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	rw := filepath.Join(root, "cache")
	cfg := filepath.Join(root, "cfg")
	for _, d := range []string{ws, rw, cfg} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(cfg, "policy.yaml")
	inside := filepath.Join(ws, "policy.yaml")
	writeFile(t, outside)
	writeFile(t, inside)
	writeFile(t, filepath.Join(rw, "p.yaml"))
	symlink := func(target, link string) string {
		t.Helper()
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		return link
	}
	// A workspace reached through a symlink, as given by a caller who did not resolve it.
	wsLink := symlink(ws, filepath.Join(root, "ws-link"))

	tests := []struct {
		name string
		path string
		ok   bool
	}{
		{"outside", outside, true},
		{"inside", inside, false},
		{"inside a read-write mount", filepath.Join(rw, "p.yaml"), false},
		{"dotdot into the workspace", filepath.Join(cfg, "..", "ws", "policy.yaml"), false},
		{"dotdot out of the workspace", filepath.Join(ws, "..", "cfg", "policy.yaml"), true},
		{"file symlink outside pointing in", symlink(inside, filepath.Join(cfg, "to-inside.yaml")), false},
		{"dir symlink outside pointing in", filepath.Join(symlink(ws, filepath.Join(cfg, "wsdir")), "policy.yaml"), false},
		{"file symlink inside pointing out", symlink(outside, filepath.Join(ws, "to-outside.yaml")), false},
		{"dir symlink inside pointing out", filepath.Join(symlink(cfg, filepath.Join(ws, "cfgdir")), "policy.yaml"), false},
		{"chain through the workspace", symlink(filepath.Join(ws, "to-outside.yaml"), filepath.Join(cfg, "chain.yaml")), false},
		{"relative symlink with dotdot", symlink("../cfg/policy.yaml", filepath.Join(ws, "rel.yaml")), false},
		{"through the workspace link", filepath.Join(wsLink, "policy.yaml"), false},
		{"symlink outside to outside", symlink("policy.yaml", filepath.Join(cfg, "alias.yaml")), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckOutside(tt.path, []string{wsLink, rw})
			if (err == nil) != tt.ok {
				t.Errorf("CheckOutside(%s) = %v, want ok=%v", tt.path, err, tt.ok)
			}
		})
	}

	if err := CheckOutside(filepath.Join(cfg, "missing.yaml"), []string{ws}); err == nil {
		t.Error("missing policy file: CheckOutside succeeded, want an error")
	}
	loop := symlink("loop.yaml", filepath.Join(cfg, "loop.yaml"))
	if err := CheckOutside(loop, []string{ws}); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("symlink loop: CheckOutside = %v, want too many levels", err)
	}
	if err := CheckOutside(outside, []string{"relative"}); err == nil {
		t.Error("relative writable dir: CheckOutside succeeded, want an error")
	}
	if err := CheckOutside(outside, []string{"/"}); err == nil {
		t.Error("writable /: CheckOutside succeeded, want an error")
	}
}
