package inpod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/cordon-sandbox/cordon/internal/atomicfile"
	"github.com/cordon-sandbox/cordon/internal/hosttool"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
)

// Exit codes of the wrapper when the command did not run or could not: docker's, as cordon run's.
const (
	exitWrapper  = 125
	exitNotExec  = 126
	exitNotFound = 127
)

// AgentOptions says what the agent's wrapper runs and where its results go.
type AgentOptions struct {
	// Dir is the checkout the command runs in, Base the commit the clone step checked out (a full
	// hash): the patch is Dir's changes against it. An empty Base is Dir's detached HEAD as Agent
	// starts, before anything of the command's has run: the pod is rendered before the clone step
	// knows the commit a branch names.
	Dir, Base string
	// Attach: read kubepod.AttachHello from Stdin before anything runs (cordon attaches to the
	// container, and an attach does not replay what was written before it).
	Attach bool
	// Args is the command.
	Args []string
	// Env is the wrapper's environment: the command's, unchanged, and what finds the command and git.
	Env []string
	// The command's streams; a terminal on Stdin becomes its controlling terminal.
	Stdin, Stdout, Stderr *os.File
	// OutDir receives kubepod.PatchFile and kubepod.StatusFile (kubepod.OutDir when empty).
	OutDir string
	// StopDir is where the gateway writes kubepod.StopFile when the run's lease lapses
	// (kubepod.TrustDir); the wrapper then ends the command as a timeout would and makes its patch.
	// Empty watches nothing.
	StopDir string

	// helloWait, for tests, is called once Stdin is raw and the wrapper waits for the hello.
	helloWait func()
}

// Agent is the agent container's entry point. It runs the command in Dir with the container's
// environment and streams, forwarding SIGTERM, SIGINT and SIGHUP to it. When the command has ended it
// kills every other process it can signal (the command's leftovers must neither outlive it nor
// change the workspace while the patch is made) and waits until they are gone, then writes Dir's
// changes against Base to OutDir/PatchFile and a Status to OutDir/StatusFile. It returns the exit
// status to use: the command's (128+signal when a signal ended it), or 125/126/127 when it did not
// run; the error says what went wrong besides. Nothing is run when Base or the attach hello is
// wrong, and no patch is made when a process outlived the kill.
func Agent(ctx context.Context, o AgentOptions) (int, error) {
	if o.OutDir == "" {
		o.OutDir = kubepod.OutDir
	}
	if fi, err := os.Stat(o.Dir); err != nil || !fi.IsDir() {
		return exitWrapper, fmt.Errorf("agent: the checkout %q is not a directory (%v)", o.Dir, err)
	}
	if o.Base == "" {
		base, err := detachedHead(o.Dir)
		if err != nil {
			return exitWrapper, err
		}
		o.Base = base
	}
	switch {
	case len(o.Args) == 0:
		return exitWrapper, errors.New("agent: no command")
	case !isCommit(o.Base):
		return exitWrapper, fmt.Errorf("agent: the base %q is not a full commit hash", o.Base)
	case o.Stdin == nil || o.Stdout == nil || o.Stderr == nil:
		return exitWrapper, errors.New("agent: the command's streams are not all given")
	}
	// Whatever is in OutDir now was not written by this wrapper.
	if err := clearResults(o.OutDir); err != nil {
		return exitWrapper, err
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	stop := watchStop(watchCtx, o.StopDir)
	if o.Attach {
		hello := make(chan error, 1)
		go func() { hello <- readHello(o.Stdin, o.helloWait) }()
		select {
		case err := <-hello:
			if err != nil {
				return exitWrapper, err
			}
		case reason := <-stop:
			// cordon never attached: nothing of the command ran, and nothing changed.
			err := fmt.Errorf("agent: %s; nothing was run", reason)
			return exitWrapper, errors.Join(err, writeStatus(o.OutDir, &kubepod.Status{Version: kubepod.Version, Base: o.Base, Stopped: reason}))
		}
		waitForSize(o.Stdin, time.Second)
	}
	// The git that makes the patch is found now, before anything of the command's runs, and only in
	// the image's own directories: the agent's root file system is read-only, while a directory of
	// the agent's PATH that it can write (its home, /tmp, the workspace) could hold a git it planted.
	patchEnv := withPath(o.Env, systemPath)
	gitPath, gitErr := lookPath(patchEnv, "git")
	runCtx, endRun := context.WithCancel(ctx)
	defer endRun()
	stopped := make(chan string, 1)
	go func() {
		select {
		case reason := <-stop:
			stopped <- reason
			endRun()
		case <-runCtx.Done():
		}
	}()
	code, runErr, killErr := runAndKill(runCtx, o)
	st := kubepod.Status{Version: kubepod.Version, Base: o.Base}
	select {
	case st.Stopped = <-stopped:
	default:
	}
	// What the command wrote to OutDir goes, whatever comes of the patch (should a leftover of its
	// outlive the kill and write again, PatchError says so, and a patch beside it is not the wrapper's).
	clearErr := clearResults(o.OutDir)
	switch {
	case killErr != nil:
		st.PatchError = killErr.Error()
	case clearErr != nil:
		st.PatchError = clearErr.Error()
	default:
		if gitErr != nil {
			st.PatchError = fmt.Sprintf("making the patch: %v (in the image's %s)", gitErr, systemPath)
		} else if err := makePatch(ctx, o, gitPath, patchEnv); err != nil {
			st.PatchError = err.Error()
		}
	}
	var patchErr error
	if st.PatchError != "" {
		patchErr = fmt.Errorf("agent: %s", st.PatchError)
	}
	if err := writeStatus(o.OutDir, &st); err != nil {
		return code, errors.Join(runErr, patchErr, err)
	}
	return code, errors.Join(runErr, patchErr)
}

// systemPath is where the patch's git is looked for: the image's directories, which the agent's
// read-only root keeps as the image made them.
const systemPath = hosttool.SystemPath

// withPath is env with its PATH replaced by path.
func withPath(env []string, path string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "PATH=") })
	return append(out, "PATH="+path)
}

// watchStop returns a channel that gets the reason once dir/kubepod.StopFile exists (the gateway
// stopped the run); it never does when dir is empty. The file is looked for four times a second: the
// lease is seconds long, and the gateway has stopped egress already when it appears.
func watchStop(ctx context.Context, dir string) <-chan string {
	stop := make(chan string, 1)
	if dir == "" {
		return stop
	}
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if reason, ok := Stopped(dir); ok {
				stop <- reason
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return stop
}

// detachedHead is the commit dir's .git/HEAD names, which must be detached (as Clone leaves it).
func detachedHead(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ".git", "HEAD"))
	if err != nil {
		return "", fmt.Errorf("agent: no --base, and the checkout's HEAD: %w", err)
	}
	head := strings.TrimSpace(string(b))
	if !isCommit(head) {
		return "", fmt.Errorf("agent: no --base, and the checkout's HEAD is not a detached commit (%.60q)", head)
	}
	return head, nil
}

// clearResults removes the results' files from dir (the command can write there too, and a file
// it left must not pass for the wrapper's).
func clearResults(dir string) error {
	for _, name := range []string{kubepod.StatusFile, kubepod.PatchFile} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("agent: clearing %s: %w", name, err)
		}
	}
	return nil
}

// readHello reads exactly kubepod.AttachHello from f, byte for byte as it arrives, so that a
// mismatch is refused at its first byte and nothing after the hello is consumed. In a terminal the
// line discipline is raw meanwhile: nothing is echoed and no byte is translated.
func readHello(f *os.File, wait func()) error {
	fd := int(f.Fd())
	if term.IsTerminal(fd) {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("agent: making the terminal raw for the attach hello: %w", err)
		}
		defer term.Restore(fd, old)
	}
	if wait != nil {
		wait()
	}
	want := []byte(kubepod.AttachHello)
	got := make([]byte, len(want))
	for n := 0; n < len(want); {
		m, err := f.Read(got[n:])
		n += m
		if !bytes.Equal(got[:n], want[:n]) {
			return errors.New("agent: stdin did not start with cordon's attach hello; nothing was run")
		}
		if err != nil && n < len(want) {
			return fmt.Errorf("agent: stdin ended before cordon's attach hello (%d of %d bytes); nothing was run: %w", n, len(want), err)
		}
	}
	return nil
}

// waitForSize waits, at most max, until a terminal on f has a size: cordon sends the local
// terminal's size beside the hello, and the API server may pass it on after the hello's bytes, so a
// command that asks for its terminal's size at once (stty size, a full-screen agent) would find
// none. Not a terminal, or a size already there, returns at once.
func waitForSize(f *os.File, max time.Duration) {
	fd := int(f.Fd())
	if !term.IsTerminal(fd) {
		return
	}
	for deadline := time.Now().Add(max); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if w, h, err := term.GetSize(fd); err != nil || w > 0 && h > 0 {
			return
		}
	}
}

// makePatch writes o.Dir's changes against o.Base to OutDir/PatchFile, untracked files included.
//
// The git that makes it reads nothing of the checkout's .git but its objects: its repository is a
// new one in a temporary directory whose alternates name the checkout's object store, with an
// index of its own. The command could have written .git/config (a filter's clean command, an
// fsmonitor, an include), .git/info/attributes, a commondir or a .git replaced whole, and the
// user's configuration, attributes and ignore files under HOME; none of it is read, and nothing
// it names runs. The worktree's .gitattributes and .gitignore are read, as git add reads them: a
// filter they name has no definition here, so it does nothing.
func makePatch(ctx context.Context, o AgentOptions, gitPath string, env []string) error {
	objects := filepath.Join(o.Dir, ".git", "objects")
	if fi, err := os.Stat(objects); err != nil || !fi.IsDir() {
		return fmt.Errorf("making the patch: the checkout has no object store at %s", objects)
	}
	tmp, err := os.MkdirTemp(tmpDir(o.Env), "cordon-patch-")
	if err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	defer os.RemoveAll(tmp)
	gitDir := filepath.Join(tmp, "git")
	init := []string{"init", "-q", "--bare", "--template="}
	if len(o.Base) == 64 {
		init = append(init, "--object-format=sha256")
	}
	g := &gitRunner{path: gitPath, env: gitEnv(env), dir: tmp}
	if _, err := g.run(ctx, append(init, gitDir)...); err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(gitDir, "objects", "info"), 0o700); err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	if err := os.WriteFile(filepath.Join(gitDir, "objects", "info", "alternates"), []byte(objects+"\n"), 0o600); err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	g.dir = o.Dir
	g.env = append(g.env, "GIT_DIR="+gitDir, "GIT_WORK_TREE="+o.Dir, "GIT_INDEX_FILE="+filepath.Join(tmp, "index"))
	g.flags = []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
		"-c", "core.attributesFile=/dev/null", "-c", "core.excludesFile=/dev/null"}
	// The index starts as Base, so a file Base tracks stays tracked even where .gitignore covers it.
	if _, err := g.run(ctx, "read-tree", o.Base); err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	if _, err := g.run(ctx, "add", "-A"); err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	f, err := createResult(o.OutDir, ".patch-")
	if err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	defer os.Remove(f.Name())
	var stderr bytes.Buffer
	err = g.runTo(ctx, f, &stderr, "diff", "--cached", "--binary", "--full-index", "--no-ext-diff", "--no-textconv",
		"--no-renames", "--no-color", o.Base, "--")
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	if err := os.Rename(f.Name(), filepath.Join(o.OutDir, kubepod.PatchFile)); err != nil {
		return fmt.Errorf("making the patch: %w", err)
	}
	return nil
}

// writeStatus writes st to dir/StatusFile, whole or not at all.
func writeStatus(dir string, st *kubepod.Status) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("agent: encoding the status: %w", err)
	}
	// 0640: the keeper reads it through the pod's fsGroup.
	if err := atomicfile.WriteLazy(filepath.Join(dir, kubepod.StatusFile), append(b, '\n'), 0o640); err != nil {
		return fmt.Errorf("agent: writing the status: %w", err)
	}
	return nil
}

// isCommit says whether s is a full commit hash (SHA-1 or SHA-256), lower case as git prints it.
func isCommit(s string) bool {
	return (len(s) == 40 || len(s) == 64) && isHex(s) && strings.ToLower(s) == s
}

// tmpDir is env's TMPDIR, else /tmp.
func tmpDir(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "TMPDIR="); ok && filepath.IsAbs(v) {
			return v
		}
	}
	return "/tmp"
}

// startError maps a failure to start the command to its exit code.
func startError(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitNotExec
}

// createResult makes a temporary file in the out directory that the keeper (another uid, in the
// pod's fsGroup, which owns every file of the pod's volumes) can read.
func createResult(dir, pattern string) (*os.File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o640); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}
