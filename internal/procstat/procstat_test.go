package procstat

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

func TestPeakRSSAndChildren(t *testing.T) {
	if kb := PeakRSS(os.Getpid()); kb <= 0 {
		t.Fatalf("PeakRSS of this process = %d KiB", kb)
	}
	if kb := PeakRSS(-1); kb != 0 {
		t.Fatalf("PeakRSS of no process = %d, want 0", kb)
	}
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if kids := Children(os.Getpid()); !slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("Children = %v, want it to hold %d", kids, cmd.Process.Pid)
	}
}
