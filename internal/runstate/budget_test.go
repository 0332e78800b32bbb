package runstate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewBudget(t *testing.T) {
	const logMax = 64 << 20
	for _, tt := range []struct {
		name        string
		disk        int64
		layers, log int64
		err         string
	}{
		{"no limit: the log is still bounded", 0, 0, logMax, ""},
		{"large disk: the default cap", 10 << 30, 10<<30 - logMax - metaReserve, logMax, ""},
		{"16 MiB: a sixteenth", 16 << 20, 16<<20 - 1<<20 - metaReserve, 1 << 20, ""},
		{"a small disk", 2 << 20, 2<<20 - 128<<10 - metaReserve, 128 << 10, ""},
		{"too small", 1 << 20, 0, 0, "limits.disk of 1048576 bytes is too small"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewBudget(tt.disk, logMax)
			if (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
			if b.Layers != tt.layers || b.AuditLog != tt.log {
				t.Errorf("NewBudget(%d) = %+v, want layers %d, log %d", tt.disk, b, tt.layers, tt.log)
			}
			if tt.disk > 0 && err == nil && b.Layers+b.AuditLog+metaReserve > tt.disk {
				t.Errorf("%+v does not fit in %d", b, tt.disk)
			}
		})
	}
}

// TestDiskUsage counts the blocks of what the run's directory holds.
func TestDiskUsage(t *testing.T) {
	s := Store{Root: t.TempDir()}
	r, err := s.Create(Meta{Project: "/p", Command: []string{"agent"}})
	if err != nil {
		t.Fatal(err)
	}
	before, err := r.DiskUsage()
	if err != nil || before <= 0 || before > 64<<10 {
		t.Fatalf("DiskUsage of a fresh run = %d, %v", before, err)
	}
	if err := os.Mkdir(filepath.Join(r.Dir, "upper"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "upper", "big"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	after, err := r.DiskUsage()
	if err != nil || after-before < 1<<20 {
		t.Errorf("DiskUsage after writing 1 MiB: %d (was %d), %v", after, before, err)
	}
}
