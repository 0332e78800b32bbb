package runstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// This file scopes runs to projects: "last" and id prefixes name runs of the project the user is
// in, so that a command typed in one project never acts on another's run. A run of another project
// is reached by its full id only, which cannot be typed by accident.

// ErrOtherProject is wrapped when "last" or a prefix would name only runs of other projects.
var ErrOtherProject = errors.New("the run is of another project")

// Last names the most recently started run (of the project, when Find is given one).
const Last = "last"

// ProjectOf returns the project dir belongs to: the top level of the git work tree that holds it
// (the nearest directory, dir or above, with a .git entry: a directory, or a file as in a linked
// work tree or a submodule), else dir itself. It reads the file system and runs nothing, so that
// resolving a run never executes a repository's configuration. dir must be absolute; it is
// cleaned but its symlinks are not resolved.
func ProjectOf(dir string) string {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		return dir
	}
	for d := dir; ; {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		up := filepath.Dir(d)
		if up == d {
			return dir
		}
		d = up
	}
}

// Find resolves what a user typed to name a run: Last, a full id, or a unique prefix of one. With a
// project (a ProjectOf result) Last and prefixes are resolved among that project's runs only, and
// naming nothing there but a run of another project is an error wrapping ErrOtherProject that names
// the run and its project; a full id names its run whatever the project. An empty project resolves
// among every run.
func (s Store) Find(name, project string) (*Run, error) {
	if name != Last && !validID(name) {
		return nil, fmt.Errorf("runstate: %q is not a run id: %w", name, ErrNotFound)
	}
	runs, err := s.runsPath()
	if err != nil {
		return nil, err
	}
	if name != Last {
		// A full id, even of a run whose record is damaged (Load says how).
		if fi, err := os.Stat(filepath.Join(runs, name)); err == nil && fi.IsDir() {
			return Load(filepath.Join(runs, name))
		}
	}
	list, err := s.List()
	if err != nil {
		return nil, err
	}
	in := projectFilter(project)
	var mine, others []*Run
	for _, r := range list {
		if name != Last && !strings.HasPrefix(r.Meta.ID, name) {
			continue
		}
		if in(r) {
			mine = append(mine, r)
		} else {
			others = append(others, r)
		}
	}
	switch {
	case len(mine) == 1 || len(mine) > 1 && name == Last:
		return mine[0], nil // List is newest first
	case len(mine) > 1:
		ids := make([]string, len(mine))
		for i, r := range mine {
			ids[i] = r.Meta.ID
		}
		return nil, fmt.Errorf("runstate: %q matches %s: %w", name, strings.Join(ids, ", "), ErrAmbiguous)
	case len(others) > 0:
		o := others[0]
		what := fmt.Sprintf("no run of this project (%s) has an id starting %q", project, name)
		if name == Last {
			what = fmt.Sprintf("no run of this project (%s) yet", project)
		}
		more := ""
		if len(others) > 1 {
			more = fmt.Sprintf(" (and %d more of other projects)", len(others)-1)
		}
		return nil, fmt.Errorf("runstate: %s; run %s is of project %s%s: name it by its full id to use it from here: %w",
			what, o.Meta.ID, o.Meta.Project, more, ErrOtherProject)
	case name == Last && project != "":
		return nil, fmt.Errorf("runstate: no runs of this project (%s) yet: %w", project, ErrNotFound)
	case name == Last:
		return nil, fmt.Errorf("runstate: no runs yet: %w", ErrNotFound)
	default:
		return nil, fmt.Errorf("runstate: run %q: %w", name, ErrNotFound)
	}
}

// projectFilter says whether a run belongs to project; every run does when project is empty.
func projectFilter(project string) func(*Run) bool {
	if project == "" {
		return func(*Run) bool { return true }
	}
	project = filepath.Clean(project)
	memo := map[string]bool{}
	return func(r *Run) bool {
		p := r.Meta.Project
		if p == "" {
			return false // a damaged record belongs to no project
		}
		in, ok := memo[p]
		if !ok {
			in = ProjectOf(p) == project
			memo[p] = in
		}
		return in
	}
}

// ListProject is List restricted to the runs of project (a ProjectOf result); empty means every run.
func (s Store) ListProject(project string) ([]*Run, error) {
	list, err := s.List()
	if err != nil {
		return nil, err
	}
	in := projectFilter(project)
	out := list[:0]
	for _, r := range list {
		if in(r) {
			out = append(out, r)
		}
	}
	return out, nil
}
