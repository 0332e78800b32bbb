package workspace

// A patch run is one whose agent worked somewhere else (a pod of the Kubernetes backend, on a clone
// of the repository at a ref) and whose changes came back as a git patch: `git add -A` then
// `git diff --cached --binary --full-index --no-renames BASE`, so untracked files are in it, binary
// files are literal or delta patches and every index line carries full blob ids. PreparePatch
// records such a run; from then on `cordon runs`, diff, apply (with the persistence guard) and
// export treat it as any other run. The patch is the record: Changes and Diff read it alone, and
// Guard, Apply and Export first materialise its new sides in the run's upper/ directory, checking
// that every old side is exactly the project's file (patchmat.go).
//
// The patch comes from a place the agent controlled, so it is parsed with go-gitdiff (no parser of
// cordon's own) and then held to what git itself would have written: full index lines, no renames or
// copies, git's three file modes, every path relative, clean and outside any .git directory, no path
// listed twice except the deletion and addition of a change of type, and no path that is both a
// file and a directory on one side.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// ModePatch is a run whose changes are the git patch changes.patch in the run's directory, against
// the commit Info.BaseCommit of Info.Repo; upper/ holds the patch's new sides once materialised.
const ModePatch = "patch"

const (
	patchFile = "changes.patch"
	// maxPatchBytes bounds what PreparePatch accepts and what one binary fragment may expand to: the
	// patch is parsed in memory, and it comes from where the agent ran.
	maxPatchBytes = 1 << 30
	// maxBinaryBytes bounds what all of a patch's binary files expand to together, as their fragments
	// state it (each fragment's own data is held to what it states when it is applied): deflate makes
	// a megabyte of patch into a gigabyte of file, and what is materialised lands on this machine's
	// disk.
	maxBinaryBytes = 4 << 30
)

// Git's file modes, the only ones a patch may name: a submodule (160000) cannot be carried as a file.
const (
	gitRegular    = 0o100644
	gitExecutable = 0o100755
	gitSymlink    = 0o120000
)

// PatchInfo says where a patch run's changes come from: the repository (its URL) the agent's clone
// was made from, the ref it was asked for, and the full id of the commit the patch is against.
type PatchInfo struct {
	Repo, Ref, Base string
}

// PreparePatch records run as a patch run for project, the user's checkout of the repository (where
// Apply writes and Export commits): it writes the patch to the run's changes.patch and then
// workspace.json, both durably. The patch must be what git wrote (see the package's patch rules);
// one that is not is refused and nothing is recorded.
func PreparePatch(run *runstate.Run, project string, p PatchInfo, patch io.Reader) error {
	project, err := cleanProject(run, project)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(run.Dir, infoFile)); err == nil {
		return fmt.Errorf("workspace: run %s already has a workspace", run.Meta.ID)
	}
	if !fullOID(p.Base) || strings.Trim(p.Base, "0") == "" {
		return fmt.Errorf("workspace: patch run %s: base %q is not a full commit id", run.Meta.ID, p.Base)
	}
	for what, s := range map[string]string{"repository": p.Repo, "ref": p.Ref} {
		if strings.ContainsFunc(s, unicode.IsControl) {
			return fmt.Errorf("workspace: patch run %s: the %s %q has control characters", run.Meta.ID, what, s)
		}
	}
	tmp, err := os.CreateTemp(run.Dir, ".changes.patch-*")
	if err != nil {
		return fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	n, err := io.Copy(tmp, io.LimitReader(patch, maxPatchBytes+1))
	if err != nil {
		return fmt.Errorf("workspace: patch run %s: reading the patch: %w", run.Meta.ID, err)
	}
	if n > maxPatchBytes {
		return fmt.Errorf("workspace: patch run %s: the patch is larger than %d bytes", run.Meta.ID, maxPatchBytes)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	if _, err := parsePatch(bufio.NewReader(tmp), len(p.Base)); err != nil {
		return fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(run.Dir, patchFile)); err != nil {
		return fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	if err := runstate.SyncDir(run.Dir); err != nil {
		return fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	// workspace.json last: a run that has one has its patch.
	return writeInfo(run, &Info{Mode: ModePatch, Project: project, Repo: p.Repo, Ref: p.Ref, BaseCommit: p.Base})
}

// patchEntry is one file of a patch, checked.
type patchEntry struct {
	path string
	kind Kind
	// oldMode and newMode are git modes, 0 for the side that does not exist.
	oldMode, newMode uint32
	// oldOID and newOID are full blob ids, all zeros for an absent side, and empty when the patch
	// has no index line: a change of mode alone, whose content is whatever the project has.
	oldOID, newOID string
	file           *gitdiff.File
}

// loadPatch reads and checks a patch run's changes.patch.
func loadPatch(run *runstate.Run, info *Info) ([]patchEntry, error) {
	f, err := os.Open(filepath.Join(run.Dir, patchFile))
	if err != nil {
		return nil, fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	defer f.Close()
	es, err := parsePatch(bufio.NewReader(io.LimitReader(f, maxPatchBytes+1)), len(info.BaseCommit))
	if err != nil {
		return nil, fmt.Errorf("workspace: patch run %s: %w", run.Meta.ID, err)
	}
	return es, nil
}

// parsePatch parses a patch with go-gitdiff and holds every file to the rules in the package's
// patch notes. oidLen is the length of the repository's object ids in hex (40 for SHA-1, 64 for
// SHA-256). Errors name the file of the patch they are about.
func parsePatch(r io.Reader, oidLen int) ([]patchEntry, error) {
	if oidLen != 40 && oidLen != 64 {
		return nil, fmt.Errorf("%s: object ids of %d hex digits", patchFile, oidLen)
	}
	files, preamble, err := gitdiff.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("%s does not parse: %w", patchFile, err)
	}
	if strings.TrimSpace(preamble) != "" {
		return nil, fmt.Errorf("%s: text before the first file; git diff writes none", patchFile)
	}
	out := make([]patchEntry, 0, len(files))
	seen := map[string][]Kind{}
	for _, f := range files {
		e, err := checkFile(f, oidLen)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", patchFile, err)
		}
		prev := seen[e.path]
		// A change of type (file to symlink) is git's deletion and addition at one path; nothing
		// else may name a path twice.
		if len(prev) > 1 || len(prev) == 1 && !(prev[0] == Deleted && e.kind == Added || prev[0] == Added && e.kind == Deleted) {
			return nil, fmt.Errorf("%s: %q is listed more than once", patchFile, e.path)
		}
		seen[e.path] = append(prev, e.kind)
		out = append(out, e)
	}
	var binary int64
	for _, e := range out {
		if e.file.BinaryFragment == nil || e.kind == Deleted {
			continue
		}
		_, n := binarySizes(e.file)
		if n < 0 {
			return nil, fmt.Errorf("%s: the binary file %q does not state its size", patchFile, e.path)
		}
		if binary += n; binary > maxBinaryBytes {
			return nil, fmt.Errorf("%s: its binary files expand to more than %d bytes", patchFile, int64(maxBinaryBytes))
		}
	}
	// On each side a path is a file or a directory, not both.
	oldSide, newSide := map[string]bool{}, map[string]bool{}
	for _, e := range out {
		if e.kind != Added {
			oldSide[e.path] = true
		}
		if e.kind != Deleted {
			newSide[e.path] = true
		}
	}
	for _, e := range out {
		for d := slashDir(e.path); d != "."; d = slashDir(d) {
			if e.kind != Added && oldSide[d] || e.kind != Deleted && newSide[d] {
				return nil, fmt.Errorf("%s: %q is below %q, which the patch has as a file", patchFile, e.path, d)
			}
		}
	}
	return out, nil
}

// checkFile turns one parsed file into an entry, or says why git would not have written it.
func checkFile(f *gitdiff.File, oidLen int) (patchEntry, error) {
	var e patchEntry
	switch {
	case f.IsRename || f.IsCopy:
		return e, fmt.Errorf("%q: renames and copies are not expected (the patch is made with --no-renames)", f.NewName)
	case f.IsNew && f.IsDelete:
		return e, fmt.Errorf("%q: both a new and a deleted file", f.NewName)
	case f.IsNew:
		e.path, e.kind, e.newMode = f.NewName, Added, uint32(f.NewMode)
	case f.IsDelete:
		e.path, e.kind, e.oldMode = f.OldName, Deleted, uint32(f.OldMode)
	default:
		if f.OldName != f.NewName {
			return e, fmt.Errorf("%q: names two paths (%q)", f.NewName, f.OldName)
		}
		e.path, e.kind, e.oldMode, e.newMode = f.NewName, Modified, uint32(f.OldMode), uint32(f.NewMode)
		if e.newMode == 0 {
			e.newMode = e.oldMode // the index line's mode, unchanged
		}
	}
	e.file = f
	if err := checkPatchPath(e.path); err != nil {
		return e, err
	}
	hasData := len(f.TextFragments) > 0 || f.BinaryFragment != nil
	switch {
	case f.OldOIDPrefix == "" && f.NewOIDPrefix == "":
		if e.kind != Modified || hasData || f.IsBinary || e.oldMode == e.newMode {
			return e, fmt.Errorf("%q: no index line with full blob ids (the patch must be made with --full-index)", e.path)
		}
	case !fullOIDLen(f.OldOIDPrefix, oidLen) || !fullOIDLen(f.NewOIDPrefix, oidLen):
		return e, fmt.Errorf("%q: index line %s..%s does not have full blob ids of %d hex digits", e.path, f.OldOIDPrefix, f.NewOIDPrefix, oidLen)
	default:
		e.oldOID, e.newOID = f.OldOIDPrefix, f.NewOIDPrefix
		zero := strings.Repeat("0", oidLen)
		if (e.kind == Added) != (e.oldOID == zero) || (e.kind == Deleted) != (e.newOID == zero) {
			return e, fmt.Errorf("%q: index line %s..%s does not fit a %s file", e.path, e.oldOID, e.newOID, e.kind)
		}
		if e.kind == Modified && e.oldOID == e.newOID && e.oldMode == e.newMode {
			return e, fmt.Errorf("%q: lists no change", e.path)
		}
	}
	sides := map[Kind][]uint32{Added: {e.newMode}, Deleted: {e.oldMode}, Modified: {e.oldMode, e.newMode}}
	for _, m := range sides[e.kind] {
		if m != gitRegular && m != gitExecutable && m != gitSymlink {
			return e, fmt.Errorf("%q: mode %06o is not a file, executable or symlink", e.path, m)
		}
	}
	if e.kind == Modified && (e.oldMode == gitSymlink) != (e.newMode == gitSymlink) {
		return e, fmt.Errorf("%q: a change of type must be a deletion and an addition", e.path)
	}
	if f.IsBinary && f.BinaryFragment == nil {
		return e, fmt.Errorf("%q: a binary file without its data (the patch must be made with --binary)", e.path)
	}
	for i, fr := range f.TextFragments {
		if err := fr.Validate(); err != nil {
			return e, fmt.Errorf("%q: fragment %d: %w", e.path, i+1, err)
		}
	}
	return e, nil
}

// checkPatchPath refuses a path that could land anywhere but in the project, or in a git directory,
// whatever the file system: absolute, with empty, "." or ".." segments, or with a segment that is
// ".git" as git's own path checks understand it (any case, HFS+'s ignored characters, NTFS's
// trailing dots and spaces and short name).
func checkPatchPath(p string) error {
	switch {
	case p == "":
		return errors.New("a file without a name")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q: an absolute path", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%q: a NUL in the path", p)
	}
	for _, s := range strings.Split(p, "/") {
		switch {
		case s == "" || s == "." || s == "..":
			return fmt.Errorf("%q: not a clean relative path", p)
		case isDotGit(s):
			return fmt.Errorf("%q: inside a .git directory, which a patch can never change", p)
		}
	}
	return nil
}

// isDotGit says whether a path segment names .git on some file system git runs on.
func isDotGit(s string) bool {
	s = strings.Map(func(r rune) rune {
		// The code points HFS+ ignores in names (git's is_hfs_dotgit).
		if r >= 0x200c && r <= 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x206a && r <= 0x206f || r == 0xfeff {
			return -1
		}
		return r
	}, s)
	s = strings.ToLower(strings.TrimRight(s, ". "))
	return s == ".git" || s == "git~1"
}

func fullOIDLen(s string, n int) bool { return len(s) == n && isLowerHex(s) }

// fullOID says whether s is a full SHA-1 or SHA-256 object id, in git's lower-case hex.
func fullOID(s string) bool { return (len(s) == 40 || len(s) == 64) && isLowerHex(s) }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// fileMode is the FileMode cordon records for a git mode when no project file says better.
func fileMode(m uint32) fs.FileMode {
	switch m {
	case gitExecutable:
		return 0o755
	case gitSymlink:
		return fs.ModeSymlink | 0o777
	}
	return 0o644
}

// newLines is the new side of a file as far as its fragments show it: all of it for an added
// file or a symlink (one line, always within its fragment's context).
func newLines(f *gitdiff.File) (string, int64) {
	var b strings.Builder
	for _, fr := range f.TextFragments {
		for _, l := range fr.Lines {
			if l.New() {
				b.WriteString(l.Line)
			}
		}
	}
	return b.String(), int64(b.Len())
}

// patchList is Changes for a patch run: the patch's files as it names them, without the project.
// Modes are git's (0644, 0755, symlinks); Size is known for added files and binary data, else 0.
func patchList(es []patchEntry) []Change {
	out := make([]Change, 0, len(es))
	for _, e := range es {
		c := Change{Path: e.path, Kind: e.kind}
		if e.kind != Added {
			c.OldMode = fileMode(e.oldMode)
		}
		if e.kind != Deleted {
			c.Mode = fileMode(e.newMode)
			c.ContentChanged = e.kind == Added || len(e.file.TextFragments) > 0 || e.file.BinaryFragment != nil
			text, n := newLines(e.file)
			switch {
			case e.newMode == gitSymlink:
				c.Target = text
			case e.file.BinaryFragment != nil:
				_, c.Size = binarySizes(e.file)
			case e.kind == Added:
				c.Size = n
			}
		}
		out = append(out, c)
	}
	return dedupe(out)
}

// binarySizes reads the old and new sizes of a binary file from its fragments: a literal states the
// size of its side, a delta starts with the sizes of both. -1 is unknown.
func binarySizes(f *gitdiff.File) (oldN, newN int64) {
	oldN, newN = -1, -1
	if f.IsNew {
		oldN = 0
	}
	if f.IsDelete {
		newN = 0
	}
	if fr := f.BinaryFragment; fr != nil {
		if fr.Method == gitdiff.BinaryPatchLiteral {
			newN = fr.Size
		} else if src, dst, ok := deltaSizes(fr); ok {
			oldN, newN = src, dst
		}
	}
	if fr := f.ReverseBinaryFragment; fr != nil && oldN < 0 {
		if fr.Method == gitdiff.BinaryPatchLiteral {
			oldN = fr.Size
		} else if _, dst, ok := deltaSizes(fr); ok {
			oldN = dst
		}
	}
	return oldN, newN
}

// deltaSizes decodes the two sizes a git delta starts with (little-endian base-128 varints).
func deltaSizes(fr *gitdiff.BinaryFragment) (src, dst int64, ok bool) {
	buf := make([]byte, 2*binary.MaxVarintLen64)
	n, _ := io.ReadFull(fr.Data(), buf)
	buf = buf[:n]
	s, i := binary.Uvarint(buf)
	if i <= 0 {
		return 0, 0, false
	}
	d, j := binary.Uvarint(buf[i:])
	if j <= 0 || s > maxPatchBytes || d > maxPatchBytes {
		return 0, 0, false
	}
	return int64(s), int64(d), true
}

// patchDiff is Diff for a patch run: the patch's files in git's own format, or their summary.
// Neither needs the project.
func patchDiff(w io.Writer, run *runstate.Run, info *Info, stat bool) error {
	es, err := loadPatch(run, info)
	if err != nil {
		return err
	}
	if stat {
		bw := bufio.NewWriter(w)
		writeStat(bw, patchStats(es))
		return bw.Flush()
	}
	// The files as parsed, printed again: what apply would write and nothing else. The stored bytes
	// may hold text between files, which the parser skips and a terminal would obey (an agent's
	// cursor movements over the lines a reviewer reads).
	bw := bufio.NewWriter(w)
	for _, e := range es {
		if _, err := bw.WriteString(e.file.String()); err != nil {
			return fmt.Errorf("workspace: diff: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("workspace: diff: %w", err)
	}
	return nil
}

// patchStats is one writeStat line per file of the patch.
func patchStats(es []patchEntry) []fileStat {
	out := make([]fileStat, 0, len(es))
	for _, e := range es {
		st := fileStat{path: e.path}
		switch {
		case e.file.BinaryFragment != nil:
			st.binary = true
			st.oldN, st.newN = binarySizes(e.file)
			st.oldN, st.newN = max(st.oldN, 0), max(st.newN, 0)
		case e.kind == Modified && len(e.file.TextFragments) == 0:
			st.modeOnly = true
			st.oldMo, st.newMo = fmt.Sprintf("%06o", e.oldMode), fmt.Sprintf("%06o", e.newMode)
		default:
			for _, fr := range e.file.TextFragments {
				st.add += int(fr.LinesAdded)
				st.del += int(fr.LinesDeleted)
			}
		}
		out = append(out, st)
	}
	return out
}
