package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cordon-sandbox/cordon/internal/atomicfile"
	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/presets"
	"github.com/cordon-sandbox/cordon/internal/suggest"
	"github.com/cordon-sandbox/cordon/internal/udiff"
)

const suggestUsage = "policy suggest [--write] [RUN]"

// cmdPolicySuggest prints, as a unified diff against the policy file a run used, the smallest
// change that would have allowed what the run was refused, and lists apart what stays refused and
// why. It reads the run's audit log and the file; --write then writes the change, refusing when the
// file is not the one the run read (its hash differs): a diff made against one text is never
// spliced into another. Nothing is allowed unless the user runs this, reads it, and asks.
func (a *app) cmdPolicySuggest(args []string) int {
	write := new(bool)
	fl := a.suggestFlags(write)
	if code, ok := a.parse(fl, suggestUsage, args); !ok {
		return code
	}
	if fl.NArg() > 1 {
		a.errorf("policy suggest: too many arguments (usage: cordon %s)", suggestUsage)
		return exitUsage
	}
	which := "last"
	if fl.NArg() == 1 {
		which = fl.Arg(0)
	}
	r, ok := a.getRun("policy suggest", []string{which})
	if !ok {
		return exitUsage
	}
	info := r.Info()
	events, err := audit.Read(r.AuditLogPath())
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(a.stdout, "run %s had no network section: nothing could leave, and no audit log says what it tried (run with --allow HOST, or a network section, to see what it asks for)\n", r.ID())
		return 0
	}
	if err != nil {
		if len(events) == 0 {
			a.errorf("policy suggest: %v", err)
			return exitCordon
		}
		// A run killed while writing its last line: the events before it still count.
		fmt.Fprintf(a.stdout, "# note: %v (the events before it are used)\n", err)
	}
	if !info.PolicyRecorded {
		a.errorf("policy suggest: run %s does not record which policy file it used (an older cordon ran it): start a new run", r.ID())
		return 1
	}
	path, builtin := info.PolicyFile, info.PolicyFile == ""
	src := []byte(suggest.DefaultText)
	changed := false
	if builtin {
		path = policy.DefaultPath(policy.LocateEnv{UID: a.uid, Home: a.getenv("HOME"), XDGConfigHome: a.getenv("XDG_CONFIG_HOME")})
	} else {
		if src, err = readCapped(path); err != nil {
			a.errorf("policy suggest: %v", err)
			return 1
		}
		changed = sha256Hex(src) != info.PolicySHA256
	}
	opts := policy.Options{Home: a.getenv("HOME")}
	pol, err := policy.Parse(path, src, opts)
	if err != nil {
		a.errorf("policy suggest: the policy file as it is now: %v", err)
		return 1
	}
	plan := suggest.Analyze(events, pol)
	defer a.printKept(plan.Kept)
	if plan.Empty() {
		fmt.Fprintf(a.stdout, "run %s was refused nothing that a policy edit should allow\n", r.ID())
		return 0
	}
	edited, err := suggest.Edit(path, src, plan)
	if err != nil {
		a.errorf("policy suggest: %v", err)
		return 1
	}
	if _, err := suggest.Check(path, edited, opts, presets.Source{Env: a.env}, plan); err != nil {
		a.errorf("policy suggest: %v", err)
		return exitCordon
	}
	if builtin {
		fmt.Fprintf(a.stdout, "# run %s had the built-in default policy (no file). This file would have allowed what it was refused;\n# save it as %s (or pass it with --policy FILE). Hosts the run got with --allow are not in it:\n", r.ID(), path)
		fmt.Fprint(a.stdout, udiff.Unified("/dev/null", path, "", string(edited)))
	} else {
		if changed {
			fmt.Fprintf(a.stdout, "# note: %s changed since run %s read it; the diff is against the file as it is now\n", path, r.ID())
		}
		fmt.Fprint(a.stdout, udiff.Unified(path, path, string(src), string(edited)))
	}
	if !*write {
		return 0
	}
	if err := a.writeSuggestion(path, builtin, info.PolicySHA256, info.Project, edited); err != nil {
		a.errorf("policy suggest --write: %v", err)
		return 1
	}
	fmt.Fprintf(a.stdout, "# wrote %s\n", path)
	return 0
}

func (a *app) suggestFlags(write *bool) *flag.FlagSet {
	fl := a.flags("policy suggest", suggestUsage)
	fl.BoolVar(write, "write", false, "after showing the change, write it to the policy file (refused if the file changed since the run)")
	return fl
}

// writeSuggestion writes edited to the policy file, after checking again, as late as it can, that
// the file is still the one the run read (or, for the built-in default, that none has appeared) and
// that it lies outside the run's workspace.
func (a *app) writeSuggestion(path string, builtin bool, recorded, project string, edited []byte) error {
	if path == "" {
		return errors.New("no place for a policy file is known (HOME is not set): write the file shown and pass it with --policy")
	}
	mode := fs.FileMode(0o644)
	if builtin {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%s exists now, and the run had the built-in default: nothing written", path)
		}
		// The directory is checked: the file does not exist yet.
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := policy.CheckOutside(filepath.Dir(path), []string{project}); err != nil {
			return err
		}
	} else {
		if err := policy.CheckOutside(path, []string{project}); err != nil {
			return err
		}
		now, err := readCapped(path)
		if err != nil {
			return err
		}
		if sha256Hex(now) != recorded {
			return fmt.Errorf("%s changed since the run read it (its SHA-256 is not the one the run recorded): nothing written; review the file and run again", path)
		}
		if fi, err := os.Stat(path); err == nil {
			mode = fi.Mode().Perm()
		}
	}
	return atomicfile.Write(path, edited, mode)
}

// readPolicyFile reads a policy file, no larger than the parser accepts.
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > policy.MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, policy.MaxFileSize)
	}
	return data, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// printKept lists the refusals the suggestion leaves alone, each with why.
func (a *app) printKept(kept []suggest.Refusal) {
	if len(kept) == 0 {
		return
	}
	fmt.Fprintln(a.stdout, "# not suggested (these stay refused):")
	for _, k := range kept {
		fmt.Fprintf(a.stdout, "#   %s (%s): %s\n", k.What, times(k.Refused), k.Why)
	}
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}
