package inpod

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// FetchOptions says where Fetch finds the run's results (kubepod's paths when empty).
type FetchOptions struct {
	OutDir, AuditDir string
}

// maxStatusBytes bounds the status file Fetch reads: the wrapper's is a few hundred bytes, and a
// larger one was not written by it.
const maxStatusBytes = 64 << 10

// Fetch writes the run's results to w as a kubepod Bundle: the wrapper's Status (none when it wrote
// none), its patch and the gateway's audit log, either of which may be absent. cordon execs it in
// the keeper container and reads the stream with kubepod.ReadBundle. A file that is a symbolic link
// or not a regular file is refused: the command could have put one in OutDir when the wrapper
// did not get to write its own.
func Fetch(w io.Writer, o FetchOptions) error {
	if o.OutDir == "" {
		o.OutDir = kubepod.OutDir
	}
	if o.AuditDir == "" {
		o.AuditDir = kubepod.AuditDir
	}
	st, err := readStatus(filepath.Join(o.OutDir, kubepod.StatusFile))
	if err != nil {
		return err
	}
	patch, err := openResult(filepath.Join(o.OutDir, kubepod.PatchFile))
	if err != nil {
		return err
	}
	audit, err := openResult(filepath.Join(o.AuditDir, kubepod.AuditFile))
	if err != nil {
		if patch != nil {
			patch.Close()
		}
		return err
	}
	var pr, ar io.Reader
	if patch != nil {
		defer patch.Close()
		pr = patch
	}
	if audit != nil {
		defer audit.Close()
		ar = audit
	}
	if err := kubepod.WriteBundle(w, st, pr, ar); err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	return nil
}

// readStatus reads and checks the wrapper's Status; nil when there is none.
func readStatus(path string) (*kubepod.Status, error) {
	f, err := openResult(path)
	if err != nil || f == nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStatusBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch: reading %s: %w", path, err)
	}
	if len(b) > maxStatusBytes {
		return nil, fmt.Errorf("fetch: %s is over %d bytes", path, maxStatusBytes)
	}
	var st kubepod.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("fetch: reading %s: %w", path, err)
	}
	if st.Version != kubepod.Version {
		return nil, fmt.Errorf("fetch: %s is of version %d, this cordon writes %d", path, st.Version, kubepod.Version)
	}
	return &st, nil
}

// openResult opens a result's file; nil when it does not exist.
func openResult(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fetch: opening %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("fetch: %s: %w", path, err)
	}
	return f, nil
}
