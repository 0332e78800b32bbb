package policy

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// The checks the policy file's values go through, exported for the flags of cordon run that set the
// same fields for one run: a value is refused by the flag exactly when the file would refuse it.

// CheckEnvName validates a variable name as env.pass and env.set do.
func CheckEnvName(s string) error {
	_, err := checkEnvName(s)
	return err
}

// ExpandMount validates a host path as filesystem.readonly and filesystem.readwrite do: absolute or
// starting with ~/ (expanded against home), never the host's whole root. It returns it cleaned.
func ExpandMount(s, home string) (string, error) { return expandMount(s, home) }

// CheckTarget validates where a mounted path appears inside, as the at of a filesystem.readonly or
// readwrite entry: absolute, never the sandbox's root. It returns it cleaned.
func CheckTarget(s string) (string, error) { return checkTarget(s) }

// CheckWorkdir validates sandbox.workdir: a path relative to the workspace that stays inside it. It
// returns it cleaned ("." for the workspace itself).
func CheckWorkdir(s string) (string, error) {
	switch {
	case s == "":
		return "", errors.New("must not be empty")
	case strings.ContainsRune(s, 0):
		return "", errors.New("must not contain NUL bytes")
	case filepath.IsAbs(s):
		return "", fmt.Errorf("%q is absolute (expected a path relative to the workspace)", s)
	case !filepath.IsLocal(s) && filepath.Clean(s) != ".":
		return "", fmt.Errorf("%q leaves the workspace (expected a path relative to it, without ..)", s)
	}
	return filepath.Clean(s), nil
}
