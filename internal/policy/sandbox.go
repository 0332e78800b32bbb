package policy

import (
	"strings"
	"time"

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
	// Kubernetes is how the run's pod looks on the kubernetes backend (cordon run --backend
	// kubernetes); nil means the flags alone say it.
	Kubernetes *Kubernetes
}

// Kubernetes holds the pod settings of the kubernetes backend. A flag of cordon run overrides each.
type Kubernetes struct {
	// Context and Namespace pick the cluster (a kubeconfig context) and the namespace of the run's
	// pod and Secret; empty means the kubeconfig's current context and its namespace.
	Context, Namespace string
	// Image is the agent's image (it needs git); CordonImage is the image with cordon's static
	// binary at /cordon, which runs the pod's setup, gateway and keeper.
	Image, CordonImage string
	// RuntimeClass is the agent pod's runtimeClassName (gVisor's where the cluster has it); empty
	// means the cluster's default runtime.
	RuntimeClass string
	// Lease is how long the pod runs on without a heartbeat from cordon (cordon killed, or cut off
	// from the cluster) before its gateway stops the run: egress ends, the agent is stopped and its
	// changes are kept for cordon gc. Zero means the default (30s); at least MinKubeLease.
	Lease time.Duration
}

// MinKubeLease is the shortest sandbox.kubernetes.lease: cordon's heartbeat goes through the API
// server and the kubelet, which a busy cluster delays by a second or two.
const MinKubeLease = 5 * time.Second

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
		field{"kubernetes", func(v *yaml.Node, p string) (err error) {
			s.Kubernetes, err = d.kubernetes(v, p)
			return err
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

func (d *decoder) kubernetes(n *yaml.Node, path string) (*Kubernetes, error) {
	k := &Kubernetes{}
	name := func(dst *string, check func(string) bool, want string) func(*yaml.Node, string) error {
		return func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			if !check(s) {
				return d.errf(v, p, "%q is not %s", s, want)
			}
			*dst = s
			return nil
		}
	}
	_, err := d.mapping(n, path,
		field{"context", name(&k.Context, func(s string) bool { return s != "" }, "a kubeconfig context")},
		field{"cordonImage", name(&k.CordonImage, validImage, "an image reference")},
		field{"image", name(&k.Image, validImage, "an image reference")},
		field{"lease", func(v *yaml.Node, p string) error {
			s, err := d.str(v, p)
			if err != nil {
				return err
			}
			t, err := time.ParseDuration(s)
			if err != nil || t < MinKubeLease {
				return d.errf(v, p, "%q is not a lease (expected a duration of at least %s, such as 30s or 2m)", s, MinKubeLease)
			}
			k.Lease = t
			return nil
		}},
		field{"namespace", name(&k.Namespace, validDNSLabel, "a namespace name (lower-case letters, digits and -, at most 63)")},
		field{"runtimeClass", name(&k.RuntimeClass, validDNSSubdomain, "a RuntimeClass name (lower-case letters, digits, - and dots)")},
	)
	return k, err
}

// validImage accepts what a container runtime could pull: no spaces or control characters, and
// not empty. The cluster says the rest.
func validImage(s string) bool {
	if s == "" || len(s) > 4096 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// validDNSLabel is Kubernetes' RFC 1123 label: a namespace's name.
func validDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// validDNSSubdomain is Kubernetes' RFC 1123 subdomain: dot-separated labels, at most 253.
func validDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !validDNSLabel(l) {
			return false
		}
	}
	return true
}

// ValidDNSLabel reports whether s can name a namespace (for the --namespace flag).
func ValidDNSLabel(s string) bool { return validDNSLabel(s) }

// ValidImage reports whether s can be an image reference (for the --image flags).
func ValidImage(s string) bool { return validImage(s) }
