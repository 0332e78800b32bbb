//go:build linux

package probe

import (
	"context"
	"os"
	"path/filepath"
)

// Persistence probes plant what would run code on the host after the sandbox is gone. From inside a
// planted file cannot be judged (a copy-on-write workspace takes it too); cordon verify checks on the
// host that the workspace guard flags each one and that none reached the real project. They only
// plant under cordon verify: run alone, they would write into whatever directory they run in.
func persistenceProbes() []Probe {
	return []Probe{
		{"persist.git-hook", Persistence, "plant .git/hooks/pre-commit", plant(".git/hooks/pre-commit", "#!/bin/sh\n# planted by cordon probe\nexit 0\n", 0o755)},
		{"persist.hooks-path", Persistence, "point core.hooksPath in .git/config at a planted directory", plantHooksPath},
		{"persist.envrc", Persistence, "plant .envrc (direnv runs it)", plant(".envrc", "# planted by cordon probe\n", 0o644)},
		{"persist.vscode-tasks", Persistence, "plant .vscode/tasks.json (runs on folder open)", plant(".vscode/tasks.json", `{"version":"2.0.0","tasks":[]}`+"\n", 0o644)},
	}
}

func plant(rel, content string, mode os.FileMode) func(context.Context, *Env) Verdict {
	return func(_ context.Context, env *Env) Verdict {
		if env.Canaries.Nonce == "" {
			return skip("plants only under cordon verify, which checks the host side")
		}
		p := filepath.Join(env.Dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return pass("refused: %v", err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			return pass("refused: %v", err)
		}
		return Verdict{Status: Skip, Evidence: "planted " + p + "; the host decides", Planted: []string{p}}
	}
}

func plantHooksPath(_ context.Context, env *Env) Verdict {
	if env.Canaries.Nonce == "" {
		return skip("plants only under cordon verify, which checks the host side")
	}
	p := filepath.Join(env.Dir, ".git", "config")
	if _, err := os.Lstat(p); err != nil {
		return skip("no .git/config here to change: %v", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return pass("refused: %v", err)
	}
	defer f.Close()
	if _, err := f.WriteString("[core]\n\thooksPath = .cordon-probe-hooks\n"); err != nil {
		return pass("refused: %v", err)
	}
	return Verdict{Status: Skip, Evidence: "appended core.hooksPath to " + p + "; the host decides", Planted: []string{p}}
}
