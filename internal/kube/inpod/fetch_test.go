package inpod

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// results makes an OutDir and an AuditDir holding the files given (absent when nil).
func results(t *testing.T, status, patch, audit []byte) FetchOptions {
	t.Helper()
	o := FetchOptions{OutDir: t.TempDir(), AuditDir: t.TempDir()}
	for _, f := range []struct {
		path string
		b    []byte
	}{{filepath.Join(o.OutDir, kubepod.StatusFile), status}, {filepath.Join(o.OutDir, kubepod.PatchFile), patch},
		{filepath.Join(o.AuditDir, kubepod.AuditFile), audit}} {
		if f.b != nil {
			if err := os.WriteFile(f.path, f.b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return o
}

// TestFetchRoundTrip: what Fetch writes, kubepod.ReadBundle reads back as it was: the status, a patch
// of several chunks with every byte value and the audit log; an absent patch is told from an empty
// one, and an absent status is nil.
func TestFetchRoundTrip(t *testing.T) {
	big := make([]byte, 3*kubepod.ChunkBytes+17)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	status := []byte(`{"version":1,"base":"` + strings.Repeat("a", 40) + `","patchError":"x"}`)
	for _, tc := range []struct {
		name                 string
		status, patch, audit []byte
	}{
		{"everything", status, big, []byte(`{"event":"dns"}` + "\n")},
		{"empty patch", status, []byte{}, nil},
		{"no patch", status, nil, []byte("audit\n")},
		{"nothing", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stream bytes.Buffer
			if err := Fetch(&stream, results(t, tc.status, tc.patch, tc.audit)); err != nil {
				t.Fatal(err)
			}
			var patch, audit bytes.Buffer
			hdr, end, err := kubepod.ReadBundle(&stream, &patch, &audit)
			if err != nil {
				t.Fatal(err)
			}
			if (hdr.Status != nil) != (tc.status != nil) {
				t.Fatalf("status %+v, want one: %v", hdr.Status, tc.status != nil)
			}
			if hdr.Status != nil && (hdr.Status.Base != strings.Repeat("a", 40) || hdr.Status.PatchError != "x") {
				t.Errorf("status %+v", hdr.Status)
			}
			if end.HasPatch != (tc.patch != nil) || !bytes.Equal(patch.Bytes(), tc.patch) || !bytes.Equal(audit.Bytes(), tc.audit) {
				t.Errorf("has patch %v (%d bytes), audit %q", end.HasPatch, patch.Len(), audit.String())
			}
		})
	}
}

// TestFetchRefuses: a status of another version or that is not JSON, and result files that are
// symbolic links (to a file the keeper can read) or FIFOs (which would hang it), are errors, and
// nothing of the linked file is written.
func TestFetchRefuses(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "status.json") // a status the wrapper did not write there
	if err := os.WriteFile(elsewhere, []byte(`{"version":1,"base":"forged"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(o FetchOptions)
		want  string
	}{
		{"status version", func(o FetchOptions) {
			os.WriteFile(filepath.Join(o.OutDir, kubepod.StatusFile), []byte(`{"version":2}`), 0o644)
		}, "version 2"},
		{"status not JSON", func(o FetchOptions) {
			os.WriteFile(filepath.Join(o.OutDir, kubepod.StatusFile), []byte(`{`), 0o644)
		}, "status.json"},
		{"status too big", func(o FetchOptions) {
			os.WriteFile(filepath.Join(o.OutDir, kubepod.StatusFile), bytes.Repeat([]byte(" "), maxStatusBytes+1), 0o644)
		}, "over"},
		{"patch a symlink", func(o FetchOptions) { os.Symlink(secret, filepath.Join(o.OutDir, kubepod.PatchFile)) }, "changes.patch"},
		{"status a symlink", func(o FetchOptions) { os.Symlink(elsewhere, filepath.Join(o.OutDir, kubepod.StatusFile)) }, "status.json"},
		{"audit a symlink", func(o FetchOptions) { os.Symlink(secret, filepath.Join(o.AuditDir, kubepod.AuditFile)) }, "audit.jsonl"},
		{"patch a FIFO", func(o FetchOptions) { syscall.Mkfifo(filepath.Join(o.OutDir, kubepod.PatchFile), 0o644) }, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := results(t, nil, nil, nil)
			tc.setup(o)
			var stream bytes.Buffer
			err := Fetch(&stream, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Fetch: %v, want an error saying %q", err, tc.want)
			}
			if strings.Contains(stream.String(), "U0VDUkVU") || strings.Contains(stream.String(), "SECRET") {
				t.Errorf("the linked file was sent: %s", stream.String())
			}
		})
	}
}
