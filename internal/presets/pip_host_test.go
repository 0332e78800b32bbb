package presets

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPipViewRunsNoProjectCode: asking pip for its index runs python3 in the workspace, which the
// sandbox writes; a pip package planted there must not be what the host imports.
func TestPipViewRunsNoProjectCode(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	ws := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	if err := os.MkdirAll(filepath.Join(ws, "pip"), 0o755); err != nil {
		t.Fatal(err)
	}
	planted := "open(" + `"` + marker + `"` + ", 'w').write('x')\n"
	if err := os.WriteFile(filepath.Join(ws, "pip", "__init__.py"), []byte(planted), 0o644); err != nil {
		t.Fatal(err)
	}
	s := Source{Env: os.Environ(), Workspace: ws}
	_, _ = s.View([]string{"pypi"})
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the workspace's pip package ran on the host")
	}
}
