package workspace

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiskLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the disk limit needs root (loop device); rootless it is reported as not enforced")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{DiskBytes: 16 << 20})
	t.Cleanup(func() { _ = Release(r) })
	info, err := LoadInfo(r)
	if err != nil || info.DiskBytes != 16<<20 || ws.Overlay == nil {
		t.Fatalf("info %+v, %v; workspace %+v", info, err, ws)
	}
	// The agent tries to write 64 MiB; the image holds 16.
	view := filepath.Join(t.TempDir(), "out")
	script := OverlayOptions(ws.Source, ws.Overlay.Upper, ws.Overlay.Work)
	cmd := exec.Command("unshare", "-Urm", "sh", "-c", "mount -t overlay overlay -o '"+script+"' "+ws.Path+
		" && cd "+ws.Path+" && printf 'small\\n' > small.txt && dd if=/dev/zero of=big bs=1M count=64 2>"+view)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("writing 64 MiB into a 16 MiB workspace succeeded: %s", out)
	}
	msg, _ := os.ReadFile(view)
	if !strings.Contains(string(msg), "No space left on device") {
		t.Errorf("want ENOSPC, dd said: %s", msg)
	}
	// Without the limit the same write goes through, into the host's file system.
	free := t.TempDir()
	if out, err := exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(free, "big"), "bs=1M", "count=64").CombinedOutput(); err != nil {
		t.Fatalf("control write failed: %v %s", err, out)
	}
	exited(t, r)
	// After the sandbox, the image is released; Changes mounts it again on demand.
	if err := Release(r); err != nil {
		t.Fatal(err)
	}
	cs, err := Changes(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(changePaths(cs), ","); !strings.Contains(got, "a small.txt") {
		t.Errorf("changes %v, want small.txt added", got)
	}
	if diskMounted(r) {
		t.Error("Changes left the image mounted")
	}
	if err := Discard(r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, diskImage)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("discard kept the image: %v", err)
	}
}

func TestCopyFallbackConflicts(t *testing.T) {
	t.Parallel()
	p := newProject(t)
	r := testRun(t, p)
	ws := prepare(t, r, p, PrepareOptions{ForceCopy: true})
	if ws.Overlay != nil || ws.Source == p {
		t.Fatalf("ForceCopy gave %+v", ws)
	}
	info, _ := LoadInfo(r)
	if !strings.Contains(info.Note, "copy") {
		t.Errorf("no one-line note about the copy: %q", info.Note)
	}
	agent(t, ws, `printf 'agent\n' >> README.md; printf 'a\n' >> docs/a.md; rm dir/y.txt`)
	exited(t, r)
	sh(t, p, `printf 'user\n' >> README.md; rm docs/a.md; printf 'user\n' > NEW-BY-USER`)
	_, err := Apply(r, ApplyOptions{})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("Apply = %v, want conflicts", err)
	}
	got := map[string]bool{}
	for _, c := range ce.Conflicts {
		got[c.Path] = true
	}
	if !got["README.md"] || !got["docs/a.md"] || len(got) != 2 {
		t.Errorf("conflicts %v, want README.md and docs/a.md only", ce.Conflicts)
	}
}
