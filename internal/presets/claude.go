package presets

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// claudeVars are the settings that tell Claude Code where its API is (an LLM gateway, a proxy of the
// company's): the caller's values, from its environment or the env block of its settings files, are
// passed into the sandbox, whose empty home has no settings.
var claudeVars = []string{"ANTHROPIC_BASE_URL", "ANTHROPIC_BEDROCK_BASE_URL", "ANTHROPIC_VERTEX_BASE_URL"}

// claudeView allows Claude Code's own hosts and, when the caller points it elsewhere
// (ANTHROPIC_BASE_URL in the environment, or in ~/.claude/settings.json or the project's
// .claude/settings.json env), that host too, and passes the setting into the sandbox.
func (s Source) claudeView(v *View) ([]policy.Endpoint, error) {
	eps := endpoints(443, "api.anthropic.com", "statsig.anthropic.com")
	settings := map[string]string{}
	var files []string
	if home := lookup(s.Env, "HOME"); home != "" {
		dir := lookup(s.Env, "CLAUDE_CONFIG_DIR")
		if dir == "" {
			dir = filepath.Join(home, ".claude")
		}
		files = append(files, filepath.Join(dir, "settings.json"))
	}
	if s.Workspace != "" {
		files = append(files, filepath.Join(s.Workspace, ".claude", "settings.json"), filepath.Join(s.Workspace, ".claude", "settings.local.json"))
	}
	for _, f := range files { // later files win, as Claude Code layers them
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var doc struct {
			Env map[string]string `json:"env"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("preset claude: %s: %w", f, err)
		}
		for k, val := range doc.Env {
			settings[k] = val
		}
	}
	for _, name := range claudeVars {
		val := lookup(s.Env, name)
		if val == "" {
			val = settings[name]
		}
		if val == "" {
			continue
		}
		more, err := urlEndpoints("claude", []string{val})
		if err != nil {
			return nil, fmt.Errorf("preset claude: %s: %w", name, err)
		}
		eps = append(eps, more...)
		v.setEnv(name, val)
	}
	return eps, nil
}
