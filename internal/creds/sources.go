package creds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// maxSecretBytes bounds what a file or command may yield: a credential is a
// token or a key, never megabytes, and a runaway command must not fill memory.
const maxSecretBytes = 64 << 10

// DefaultCommandTimeout bounds a credential command that sets no timeout. It
// is generous because the command may prompt the operator (a passphrase).
const DefaultCommandTimeout = 2 * time.Minute

// trimNewline removes one trailing "\n" or "\r\n": files written by editors
// and commands such as `pass show` end their single line with one, and it is
// never part of a token.
func trimNewline(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// EnvSource is a variable from the operator's environment (the one cordon
// was started with, not the sandbox's, which is built from nothing). The
// value is taken when the source is made and kept as a Secret: the source
// does not hold the environment, which likely holds other secrets.
type EnvSource struct {
	name  string
	value Secret
	err   error
}

// FromEnv returns a source for variable name in environ (as os.Environ
// returns it). When the variable is set more than once the last setting
// wins, as it does for os/exec.
func FromEnv(environ []string, name string) *EnvSource {
	e := &EnvSource{name: name}
	found := false
	var v string
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v, found = val, true
		}
	}
	switch {
	case !found:
		e.err = fmt.Errorf("environment variable %s is not set", name)
	case v == "":
		e.err = fmt.Errorf("environment variable %s is empty", name)
	default:
		e.value = NewSecret(v)
	}
	return e
}

// Secret returns the variable's value.
func (e *EnvSource) Secret(context.Context) (Secret, error) { return e.value, e.err }

// Close does nothing: the environment mints nothing.
func (*EnvSource) Close(context.Context) error { return nil }

// FileSource reads a credential from a file. The file must be readable by its
// owner only (as ssh demands of private keys): a secret that other users can
// read is already leaked, and cordon should not pretend to protect it.
type FileSource struct {
	// Path is the file's path; a leading "~/" means the operator's home.
	Path string
}

// FromFile returns a source reading path.
func FromFile(path string) *FileSource { return &FileSource{Path: path} }

// Secret reads the file afresh (so a rotated key is picked up) and returns
// its content without one trailing newline.
func (f *FileSource) Secret(context.Context) (Secret, error) {
	path, err := expandHome(f.Path)
	if err != nil {
		return Secret{}, err
	}
	file, err := os.Open(path)
	if err != nil {
		return Secret{}, fmt.Errorf("credential file: %w", err)
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return Secret{}, fmt.Errorf("credential file: %w", err)
	}
	if !info.Mode().IsRegular() {
		return Secret{}, fmt.Errorf("credential file %s is not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return Secret{}, fmt.Errorf("credential file %s has mode %04o: other users can access it (chmod 600 it)", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(file, maxSecretBytes+1))
	if err != nil {
		return Secret{}, fmt.Errorf("credential file %s: %w", path, err)
	}
	if len(b) > maxSecretBytes {
		return Secret{}, fmt.Errorf("credential file %s is larger than %d bytes", path, maxSecretBytes)
	}
	b = trimNewline(b)
	if len(b) == 0 {
		return Secret{}, fmt.Errorf("credential file %s is empty", path)
	}
	return NewSecret(string(b)), nil
}

// Close does nothing: a file mints nothing.
func (*FileSource) Close(context.Context) error { return nil }

func expandHome(path string) (string, error) {
	if path == "" {
		return "", errors.New("credential file: empty path")
	}
	if path != "~" && !strings.HasPrefix(path, "~/") {
		return path, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("credential file %s: %w", path, err)
	}
	return filepath.Join(home, strings.TrimPrefix(path[1:], "/")), nil
}

// CommandSource runs a command outside the sandbox, as git runs a credential
// helper, and takes its standard output (less one trailing newline) as the
// credential. The command runs once per source: its output is kept for the
// run, so an operator is prompted at most once.
type CommandSource struct {
	// Argv is the command and its arguments; Argv[0] is looked up in PATH.
	Argv []string
	// Stdin and Stderr are given to the command so that it can prompt the
	// operator (nil: no input, and stderr discarded).
	Stdin  io.Reader
	Stderr io.Writer
	// Timeout bounds the command; zero means DefaultCommandTimeout.
	Timeout time.Duration

	mu     sync.Mutex
	done   bool
	secret Secret
	err    error
}

// FromCommand returns a source running argv, its prompts going to stderr.
func FromCommand(argv []string, stdin io.Reader, stderr io.Writer) *CommandSource {
	return &CommandSource{Argv: argv, Stdin: stdin, Stderr: stderr}
}

// Secret runs the command the first time and returns the same result (value
// or error) afterwards. Errors name the command and how it ended, never what
// it printed: its output may be the secret, or part of it.
func (c *CommandSource) Secret(ctx context.Context) (Secret, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.secret, c.err = c.run(ctx)
		c.done = true
	}
	return c.secret, c.err
}

func (c *CommandSource) run(ctx context.Context) (Secret, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return Secret{}, errors.New("credential command: empty command")
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultCommandTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Stdin, cmd.Stderr = c.Stdin, c.Stderr
	cmd.WaitDelay = time.Second
	out := &limitedBuffer{max: maxSecretBytes}
	cmd.Stdout = out
	err := cmd.Run()
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return Secret{}, fmt.Errorf("credential command %s: timed out after %v", c.Argv[0], timeout)
	case err != nil:
		// err is an *exec.ExitError or a start error: neither carries output.
		return Secret{}, fmt.Errorf("credential command %s: %w", c.Argv[0], err)
	case out.over:
		return Secret{}, fmt.Errorf("credential command %s: printed more than %d bytes", c.Argv[0], maxSecretBytes)
	}
	b := trimNewline(out.buf.Bytes())
	if len(b) == 0 {
		return Secret{}, fmt.Errorf("credential command %s: printed nothing", c.Argv[0])
	}
	return NewSecret(string(b)), nil
}

// Close does nothing: the command's value is not revoked by cordon.
func (*CommandSource) Close(context.Context) error { return nil }

// Format prints the command's name only: its output is the secret, and its
// arguments may name where the secret lives.
func (c *CommandSource) Format(f fmt.State, _ rune) {
	name := ""
	if len(c.Argv) > 0 {
		name = c.Argv[0]
	}
	_, _ = io.WriteString(f, "command "+name)
}

// limitedBuffer keeps up to max bytes and notes that more came, so a command
// printing without end is neither buffered whole nor blocked on a full pipe.
type limitedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); len(p) > room {
		l.over = true
		if room > 0 {
			l.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return l.buf.Write(p)
}

// String names the variable.
func (e *EnvSource) String() string { return "env " + e.name }

// SourceFuncs adapts a pair of functions to Source, so that a minting source
// written without this package (a GitHub App's Token and Revoke methods,
// say) plugs in without a wrapper type:
//
//	creds.SourceFuncs{Token: app.Token, Revoke: app.Revoke}
type SourceFuncs struct {
	// Token returns the current value; it must be safe for concurrent use.
	Token func(ctx context.Context) (string, error)
	// Revoke, if set, is called by Close.
	Revoke func(ctx context.Context) error
}

// Secret calls Token; an empty token is an error.
func (f SourceFuncs) Secret(ctx context.Context) (Secret, error) {
	if f.Token == nil {
		return Secret{}, errors.New("credential source has no Token function")
	}
	t, err := f.Token(ctx)
	if err != nil {
		return Secret{}, err
	}
	if t == "" {
		return Secret{}, errors.New("credential source gave an empty token")
	}
	return NewSecret(t), nil
}

// Close calls Revoke, if set.
func (f SourceFuncs) Close(ctx context.Context) error {
	if f.Revoke == nil {
		return nil
	}
	return f.Revoke(ctx)
}

// Format prints the type only: the functions' closures may hold anything.
func (SourceFuncs) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, "creds.SourceFuncs") }
