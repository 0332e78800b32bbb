package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// Export commits the run's result on a new branch of the project's git repository: HEAD's tree with
// the run's changes on top, as a commit whose parent is HEAD. The user's working tree, index and
// current branch are not touched: the commit is built with plumbing (hash-object, a temporary
// GIT_INDEX_FILE, write-tree, commit-tree) and the branch is created only if it does not exist yet.
// Risky changes are refused as by Apply. Nothing under a .git directory is ever exported (git
// cannot store it), nor fifos or device files.
func Export(run *runstate.Run, branch string, opts ApplyOptions) (commit string, err error) {
	unlock, err := run.Lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	fresh, err := runstate.Load(run.Dir)
	if err != nil {
		return "", err
	}
	run.Meta = fresh.Meta
	switch run.Meta.State {
	case runstate.StateExited, runstate.StateInterrupted, runstate.StateApplied, runstate.StateExported:
	default:
		return "", fmt.Errorf("workspace: run %s is %s; only a finished run can be exported", run.Meta.ID, run.Meta.State)
	}
	info, err := LoadInfo(run)
	if err != nil {
		return "", err
	}
	g, err := newGit(info.Project, run.Dir)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(branch, "-") {
		return "", fmt.Errorf("workspace: invalid branch name %q", branch)
	}
	ref := "refs/heads/" + branch
	if _, err := g.run(nil, "check-ref-format", ref); err != nil {
		return "", fmt.Errorf("workspace: invalid branch name %q", branch)
	}
	if _, err := g.run(nil, "rev-parse", "--verify", "--quiet", ref); err == nil {
		return "", fmt.Errorf("workspace: branch %s already exists; choose another name", branch)
	}
	release, err := attachDisk(run, info)
	if err != nil {
		return "", err
	}
	defer release()
	cs, err := changesFor(run, info)
	if err != nil {
		return "", err
	}
	risks, err := guard(info.Project, cs)
	if err != nil {
		return "", err
	}
	if blocked := refused(risks, opts.IncludeRisky); len(blocked) > 0 {
		return "", &RiskError{Risks: blocked}
	}

	head, headErr := g.run(nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if headErr == nil {
		_, err = g.run(nil, "read-tree", head)
	} else {
		_, err = g.run(nil, "read-tree", "--empty")
	}
	if err != nil {
		return "", err
	}
	index, err := g.indexLines(cs)
	if err != nil {
		return "", err
	}
	if _, err := g.run(index, "update-index", "-z", "--index-info"); err != nil {
		return "", err
	}
	tree, err := g.run(nil, "write-tree")
	if err != nil {
		return "", err
	}
	args := []string{"commit-tree", tree, "-m", exportMessage(run)}
	if headErr == nil {
		args = append(args, "-p", head)
	}
	commit, err = g.run(nil, args...)
	if err != nil {
		return "", err
	}
	// The all-zero old value makes git refuse if the branch appeared meanwhile.
	if _, err := g.run(nil, "update-ref", "-m", "cordon export "+run.Meta.ID, ref, commit, g.zero); err != nil {
		return "", err
	}
	err = run.UpdateLocked(func(m *runstate.Meta) error {
		if m.State != runstate.StateApplied {
			m.State = runstate.StateExported
		}
		m.Branch = branch
		return nil
	})
	return commit, err
}

func exportMessage(run *runstate.Run) string {
	cmd := strings.Join(run.Meta.Command, " ")
	if len(cmd) > 60 {
		cmd = cmd[:60] + "…"
	}
	return fmt.Sprintf("cordon: %s\n\nChanges made by the agent in cordon run %s.\n", cmd, run.Meta.ID)
}

// gitRepo runs plumbing against the project's repository with a private index.
type gitRepo struct {
	bin, project, prefix string
	env                  []string
	tmp                  string
	zero                 string // the null object id of the repository's hash
}

func newGit(project, runDir string) (*gitRepo, error) {
	bin, err := hosttool.Find("git", nil, project)
	if err != nil {
		return nil, fmt.Errorf("workspace: export needs git: %w", err)
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GIT_") {
			env = append(env, e)
		}
	}
	g := &gitRepo{bin: bin, project: project, tmp: runDir,
		env: append(env, "GIT_INDEX_FILE="+filepath.Join(runDir, "export.index"), "LC_ALL=C")}
	_ = os.Remove(filepath.Join(runDir, "export.index"))
	out, err := g.run(nil, "rev-parse", "--show-toplevel", "--show-prefix")
	if err != nil {
		return nil, fmt.Errorf("workspace: %s is not in a git repository: %w", project, err)
	}
	// Index paths are relative to the top of the work tree, which the project may be below.
	top, prefix, _ := strings.Cut(out, "\n")
	g.project, g.prefix = top, strings.TrimSpace(prefix)
	g.zero = strings.Repeat("0", 40)
	if f, err := g.run(nil, "rev-parse", "--show-object-format"); err == nil && f == "sha256" {
		g.zero = strings.Repeat("0", 64)
	}
	if _, err := g.run(nil, "var", "GIT_AUTHOR_IDENT"); err != nil {
		g.env = append(g.env, "GIT_AUTHOR_NAME=cordon", "GIT_AUTHOR_EMAIL=cordon@localhost",
			"GIT_COMMITTER_NAME=cordon", "GIT_COMMITTER_EMAIL=cordon@localhost")
	}
	return g, nil
}

func (g *gitRepo) run(stdin []byte, args ...string) (string, error) {
	cmd := exec.Command(g.bin, args...)
	cmd.Dir = g.project
	cmd.Env = g.env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// indexLines hashes the run's new files into the object store and returns update-index -z
// --index-info input that applies every change.
func (g *gitRepo) indexLines(cs []Change) ([]byte, error) {
	type entry struct {
		mode, path, file string
	}
	var adds []entry
	var out bytes.Buffer
	n := 0
	for _, c := range cs {
		if hasGitDir(c.Path) {
			continue
		}
		full := g.prefix + c.Path
		switch {
		case c.Kind == Deleted:
			if !c.OldMode.IsDir() {
				fmt.Fprintf(&out, "0 %s\t%s\x00", g.zero, full)
			}
		case c.Mode.IsRegular():
			mode := "100644"
			if c.Mode&0o100 != 0 {
				mode = "100755"
			}
			adds = append(adds, entry{mode, full, c.src})
		case c.Mode&fs.ModeSymlink != 0:
			n++
			f := filepath.Join(g.tmp, "export-link-"+strconv.Itoa(n))
			if err := os.WriteFile(f, []byte(c.Target), 0o600); err != nil {
				return nil, fmt.Errorf("workspace: export: %w", err)
			}
			defer os.Remove(f)
			adds = append(adds, entry{"120000", full, f})
		}
	}
	if len(adds) > 0 {
		var paths bytes.Buffer
		for _, a := range adds {
			if strings.ContainsAny(a.file, "\n") {
				return nil, errors.New("workspace: export: a path contains a newline")
			}
			paths.WriteString(a.file + "\n")
		}
		// --no-filters: the agent's files go in as they are; no clean filter of the project runs.
		ids, err := g.run(paths.Bytes(), "hash-object", "-w", "--no-filters", "--stdin-paths")
		if err != nil {
			return nil, err
		}
		lines := strings.Split(ids, "\n")
		if len(lines) != len(adds) {
			return nil, fmt.Errorf("workspace: export: git hashed %d of %d files", len(lines), len(adds))
		}
		for i, a := range adds {
			fmt.Fprintf(&out, "%s %s\t%s\x00", a.mode, lines[i], a.path)
		}
	}
	return out.Bytes(), nil
}

// hasGitDir says whether a path is or is inside a .git entry, which git cannot store in a tree.
func hasGitDir(p string) bool {
	for _, s := range strings.Split(p, "/") {
		if strings.EqualFold(s, ".git") {
			return true
		}
	}
	return false
}
