package workspace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// Diff writes what the agent changed as a git-style diff (headers, new/deleted file modes, mode
// changes, "Binary files ... differ"), or with stat a per-file summary like `git diff --stat`.
//
// The headers are cordon's own, so paths are exact and quoted as git quotes them; the text hunks
// come from the host's `git diff --no-index`, the diff users already read every day. git is run
// with no system or global config, no external diff and no textconv, outside any repository, so
// nothing the user or the agent configured runs on the agent's files.
//
// A patch run's diff is its patch as git wrote it, and its stat is summarised from the patch; neither
// needs the project.
func Diff(w io.Writer, run *runstate.Run, stat bool) error {
	info, err := LoadInfo(run)
	if err != nil {
		return err
	}
	if info.Mode == ModePatch {
		return patchDiff(w, run, info, stat)
	}
	release, err := attachDisk(run, info)
	if err != nil {
		return err
	}
	defer release()
	cs, err := changesFor(run, info)
	if err != nil {
		return err
	}
	git, err := hosttool.Find("git", nil, info.Project)
	if err != nil {
		return fmt.Errorf("workspace: diff needs git: %w", err)
	}
	tmp, err := os.MkdirTemp(run.Dir, ".diff")
	if err != nil {
		return fmt.Errorf("workspace: diff: %w", err)
	}
	defer os.RemoveAll(tmp)
	d := &differ{git: git, project: info.Project, tmp: tmp}
	bw := bufio.NewWriter(w)
	var stats []fileStat
	for _, c := range mergeTypeChanges(cs) {
		fd, err := d.file(c)
		if err != nil {
			return fmt.Errorf("workspace: diff %s: %w", c.path(), err)
		}
		if fd == nil {
			continue
		}
		if stat {
			stats = append(stats, fd.stat)
		} else if _, err := bw.Write(fd.text); err != nil {
			return err
		}
	}
	if stat {
		writeStat(bw, stats)
	}
	return bw.Flush()
}

// filePair is one entry of the diff: a deletion, an addition, or both at the same path.
type filePair struct{ old, new *Change }

func (p filePair) path() string {
	if p.new != nil {
		return p.new.Path
	}
	return p.old.Path
}

// mergeTypeChanges pairs changes into diff entries. Directories produce no entry, as in git.
func mergeTypeChanges(cs []Change) []filePair {
	var out []filePair
	for i := range cs {
		c := &cs[i]
		if c.Kind == Deleted && c.OldMode.IsDir() || c.Kind != Deleted && c.Mode.IsDir() {
			continue
		}
		switch c.Kind {
		case Deleted:
			out = append(out, filePair{old: c})
		case Added:
			out = append(out, filePair{new: c})
		case Modified:
			out = append(out, filePair{old: c, new: c})
		}
	}
	return out
}

type fileStat struct {
	path         string
	add, del     int
	binary       bool
	oldN, newN   int64
	modeOnly     bool
	oldMo, newMo string
}

type fileDiff struct {
	text []byte
	stat fileStat
}

type differ struct {
	git, project, tmp string
	n                 int
}

// gitMode is the mode git prints for an entry.
func gitMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "120000"
	case m.IsDir():
		return "040000"
	case m.IsRegular():
		if m&0o100 != 0 {
			return "100755"
		}
		return "100644"
	}
	// fifos, devices and sockets have no git mode; show the kernel's file type bits.
	t := "060" // block device
	switch {
	case m&fs.ModeNamedPipe != 0:
		t = "010"
	case m&fs.ModeSocket != 0:
		t = "140"
	case m&fs.ModeCharDevice != 0:
		t = "020"
	}
	return fmt.Sprintf("%s%03o", t, m.Perm())
}

// side is one half of a diff entry: a file to hand git, and what it is.
type side struct {
	path   string // a file git can read, or /dev/null
	mode   fs.FileMode
	exists bool
	data   []byte // first bytes, for binary detection
	size   int64
}

func (d *differ) side(c *Change, old bool) (side, error) {
	if c == nil {
		return side{path: os.DevNull}, nil
	}
	mode, src := c.Mode, c.src
	if old {
		mode, src = c.OldMode, filepath.Join(d.project, filepath.FromSlash(c.Path))
	}
	s := side{path: src, mode: mode, exists: true}
	switch {
	case mode&fs.ModeSymlink != 0:
		t, err := os.Readlink(src)
		if err != nil {
			return s, err
		}
		d.n++
		s.path = filepath.Join(d.tmp, strconv.Itoa(d.n))
		if err := os.WriteFile(s.path, []byte(t), 0o600); err != nil {
			return s, err
		}
		s.data, s.size = []byte(t), int64(len(t))
	case mode.IsRegular():
		f, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return s, err
		}
		defer f.Close()
		buf := make([]byte, 8000)
		n, err := io.ReadFull(f, buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return s, err
		}
		fi, err := f.Stat()
		if err != nil {
			return s, err
		}
		s.data, s.size = buf[:n], fi.Size()
	default:
		s.path = os.DevNull
	}
	return s, nil
}

// file renders one diff entry; nil when there is nothing to show.
func (d *differ) file(p filePair) (*fileDiff, error) {
	name := p.path()
	a, err := d.side(p.old, true)
	if err != nil {
		return nil, err
	}
	b, err := d.side(p.new, false)
	if err != nil {
		return nil, err
	}
	var h bytes.Buffer
	qa, qb := quotePath("a/"+name), quotePath("b/"+name)
	fmt.Fprintf(&h, "diff --git %s %s\n", qa, qb)
	st := fileStat{path: name}
	switch {
	case !a.exists:
		fmt.Fprintf(&h, "new file mode %s\n", gitMode(b.mode))
		qa = "/dev/null"
	case !b.exists:
		fmt.Fprintf(&h, "deleted file mode %s\n", gitMode(a.mode))
		qb = "/dev/null"
	case gitMode(a.mode) != gitMode(b.mode):
		fmt.Fprintf(&h, "old mode %s\nnew mode %s\n", gitMode(a.mode), gitMode(b.mode))
		st.oldMo, st.newMo = gitMode(a.mode), gitMode(b.mode)
	}
	contentChanged := p.old == nil || p.new == nil || p.new.ContentChanged
	if !contentChanged {
		if st.oldMo == "" {
			return nil, nil // e.g. only setuid or group bits, which git does not show
		}
		st.modeOnly = true
		return &fileDiff{text: h.Bytes(), stat: st}, nil
	}
	if bytes.IndexByte(a.data, 0) >= 0 || bytes.IndexByte(b.data, 0) >= 0 {
		fmt.Fprintf(&h, "Binary files %s and %s differ\n", qa, qb)
		st.binary, st.oldN, st.newN = true, a.size, b.size
		return &fileDiff{text: h.Bytes(), stat: st}, nil
	}
	hunks, err := d.hunks(a.path, b.path)
	if err != nil {
		return nil, err
	}
	if len(hunks) > 0 {
		fmt.Fprintf(&h, "--- %s\n+++ %s\n", qa, qb)
		h.Write(hunks)
	}
	for _, line := range bytes.Split(hunks, []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte("+")):
			st.add++
		case bytes.HasPrefix(line, []byte("-")):
			st.del++
		}
	}
	return &fileDiff{text: h.Bytes(), stat: st}, nil
}

// hunks runs git diff --no-index on two files and keeps the hunks (from the first "@@").
func (d *differ) hunks(a, b string) ([]byte, error) {
	cmd := exec.Command(d.git, "diff", "--no-index", "--no-color", "--no-ext-diff", "--no-textconv",
		"--no-renames", "-U3", "--", a, b)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CEILING_DIRECTORIES=/", "LC_ALL=C", "GIT_PAGER=cat"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return nil, fmt.Errorf("git diff: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	i := bytes.Index(out, []byte("\n@@ "))
	if i < 0 {
		return nil, nil
	}
	return out[i+1:], nil
}

// quotePath quotes a path as git does when it has control, quote, backslash or non-ASCII bytes.
func quotePath(p string) string {
	need := false
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			need = true
			break
		}
	}
	if !need {
		return p
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, "\\%03o", c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// writeStat prints the --stat form.
func writeStat(w io.Writer, stats []fileStat) {
	width, maxN := 0, 0
	for _, s := range stats {
		width = max(width, len(quotePath(s.path)))
		maxN = max(maxN, s.add+s.del)
	}
	adds, dels := 0, 0
	for _, s := range stats {
		switch {
		case s.binary:
			fmt.Fprintf(w, " %-*s | Bin %d -> %d bytes\n", width, quotePath(s.path), s.oldN, s.newN)
		case s.modeOnly:
			fmt.Fprintf(w, " %-*s | 0 (mode %s -> %s)\n", width, quotePath(s.path), s.oldMo, s.newMo)
		default:
			n := s.add + s.del
			pa, pd := s.add, s.del
			if maxN > 50 {
				pa, pd = s.add*50/maxN, s.del*50/maxN
				if s.add > 0 && pa == 0 {
					pa = 1
				}
				if s.del > 0 && pd == 0 {
					pd = 1
				}
			}
			fmt.Fprintf(w, " %-*s | %d %s%s\n", width, quotePath(s.path), n, strings.Repeat("+", pa), strings.Repeat("-", pd))
		}
		adds += s.add
		dels += s.del
	}
	plural := func(n int, one, many string) string {
		if n == 1 {
			return one
		}
		return many
	}
	fmt.Fprintf(w, " %d %s changed, %d %s(+), %d %s(-)\n", len(stats), plural(len(stats), "file", "files"),
		adds, plural(adds, "insertion", "insertions"), dels, plural(dels, "deletion", "deletions"))
}
