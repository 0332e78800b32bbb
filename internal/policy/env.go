package policy

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// The env section: which variables of the caller's environment reach the sandbox, and which are set.

// Env says which variables enter the sandbox's otherwise empty environment.
type Env struct {
	// Pass names variables copied from the caller's environment when set there.
	Pass []string
	// Set gives variables fixed values; it wins over Pass.
	Set map[string]string
	// FromFlag are the names of Pass and Set that cordon run's -e put there for one run, so that a
	// message about one names the flag the user typed, not a file that does not hold it. The file
	// has no such field.
	FromFlag []string
}

func (d *decoder) env(n *yaml.Node, path string) (e Env, err error) {
	_, err = d.mapping(n, path,
		field{"pass", func(v *yaml.Node, p string) (err error) {
			e.Pass, err = d.strs(v, p, checkEnvName)
			return err
		}},
		field{"set", func(v *yaml.Node, p string) error {
			return d.pairs(v, p, func(k, val *yaml.Node, kp string) error {
				if _, err := checkEnvName(k.Value); err != nil {
					return d.errf(k, kp, "%v", err)
				}
				// Environment values are text: 1 and true are taken as written.
				switch val.ShortTag() {
				case "!!str", "!!int", "!!float", "!!bool":
				default:
					return d.errf(val, kp, "expected a string, got %s", describe(val))
				}
				if val.Kind != yaml.ScalarNode || strings.ContainsRune(val.Value, 0) {
					return d.errf(val, kp, "expected a string without NUL bytes")
				}
				if e.Set == nil {
					e.Set = make(map[string]string)
				}
				e.Set[k.Value] = val.Value
				return nil
			})
		}},
	)
	return e, err
}
