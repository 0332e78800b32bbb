package policy

import (
	"go.yaml.in/yaml/v3"
)

// The sandbox section: how the box itself looks to the agent.

// Sandbox holds settings of the isolation itself.
type Sandbox struct {
	// AllowNesting permits user namespaces inside, for tools that sandbox themselves.
	AllowNesting bool
	// Hostname is the host name the sandbox sees.
	Hostname string
	// Workdir is the directory the command starts in, relative to the workspace (cordon run
	// --workdir); empty means the directory cordon was started in when that is inside the
	// workspace, else the workspace.
	Workdir string
	// Isolation is the tier the box is: "native" (cordon's own sandbox on the host kernel; the
	// default when empty) or "gvisor" (the same box around gVisor's user-space kernel).
	Isolation string
	// Runsc is the runsc binary for the gvisor tier; empty means PATH.
	Runsc string
}

// The isolation tiers a policy may name.
const (
	IsolationNative = "native"
	IsolationGVisor = "gvisor"
)

func (d *decoder) sandbox(n *yaml.Node, path string, s *Sandbox) error {
	_, err := d.mapping(n, path,
		field{"allowNesting", func(v *yaml.Node, p string) (err error) {
			s.AllowNesting, err = d.boolean(v, p)
			return err
		}},
		field{"hostname", func(v *yaml.Node, p string) error {
			h, err := d.str(v, p)
			if err != nil {
				return err
			}
			if len(h) > 64 || !allLabels(h) {
				return d.errf(v, p, "%q is not a valid host name (expected letters, digits, - and dots, at most 64 characters)", h)
			}
			s.Hostname = h
			return nil
		}},
		field{"isolation", func(v *yaml.Node, p string) error {
			i, err := d.str(v, p)
			if err != nil {
				return err
			}
			if i != IsolationNative && i != IsolationGVisor {
				return d.errf(v, p, "%q is not an isolation tier (expected native or gvisor)", i)
			}
			s.Isolation = i
			return nil
		}},
		field{"runsc", func(v *yaml.Node, p string) (err error) {
			s.Runsc, err = d.path(v, p)
			return err
		}},
		field{"workdir", func(v *yaml.Node, p string) error {
			w, err := d.str(v, p)
			if err != nil {
				return err
			}
			if s.Workdir, err = CheckWorkdir(w); err != nil {
				return d.errf(v, p, "%v", err)
			}
			return nil
		}},
	)
	return err
}
