package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// runFlags are cordon run's per-run additions to the policy, in the form docker and podman users
// know. Each is the flag form of a policy field and is checked as the file's value would be; a bad
// value is kept (with the name it was given as) and reported after parsing, so that the user gets
// one line naming the flag and exit status 125, as for any other reason a run did not start.
type runFlags struct {
	allow   []policy.Endpoint
	env     []string // KEY (env.pass) or KEY=VALUE (env.set), in order
	volumes []volume
	memory  policy.ByteSize
	cpus    float64
	pids    int64
	timeout time.Duration
	noNet   bool
	workdir string
	name    string
	publish []cordon.Publish
	// isolation is --isolation's tier ("" when not given).
	isolation string
	// keepServices is --keep-services (a cmdRun flag, carried here to the start).
	keepServices bool
	// allowRaw are the --allow values as given, for a gateway that parses the policy again (the
	// kubernetes backend's, in the pod).
	allowRaw []string
	// backend is --backend ("" or native: this machine; kubernetes: a pod); kube its flags.
	backend string
	kube    kubeFlags
	bad     error // the first bad value
}

// volume is one --volume: a host path, where it appears inside ("" for its own path), and whether
// it is writable.
type volume struct {
	host, target string
	readOnly     bool
}

// register adds the flags to fl. A flag with a short form (-e, -v) has both names on the same value.
func (r *runFlags) register(fl *flag.FlagSet) {
	r.add(fl, []string{"allow"}, "allow `HOST[:PORT]` (port 443 if omitted) for this run, in addition to the policy; repeatable", func(v string) error {
		ep, err := parseAllow(v)
		if err == nil {
			r.allow = append(r.allow, ep)
			r.allowRaw = append(r.allowRaw, v)
		}
		return err
	})
	r.add(fl, []string{"p", "publish"}, "publish `[IP:]HOSTPORT:PORT`: connections to HOSTPORT on IP (127.0.0.1 if omitted) go to PORT on the sandbox's loopback, for a server the command runs; each is in the audit log; repeatable", func(v string) error {
		p, err := parsePublish(v)
		if err == nil {
			r.publish = append(r.publish, p)
		}
		return err
	})
	r.add(fl, []string{"e", "env"}, "set `KEY[=VALUE]` for this run: KEY alone passes your value (env.pass), KEY=VALUE sets it (env.set); repeatable", func(v string) error {
		k, _, _ := strings.Cut(v, "=")
		if err := policy.CheckEnvName(k); err != nil {
			return err
		}
		if strings.ContainsRune(v, 0) {
			return errors.New("the value must not contain NUL bytes")
		}
		r.env = append(r.env, v)
		return nil
	})
	r.add(fl, []string{"v", "volume"}, "mount `HOST[:PATH][:ro]` inside: read-write, or read-only with :ro, at PATH when given (filesystem.readwrite/readonly); repeatable", func(v string) error {
		vol, err := parseVolume(v)
		if err == nil {
			r.volumes = append(r.volumes, vol)
		}
		return err
	})
	r.add(fl, []string{"memory"}, "limit memory to `SIZE`, such as 512MiB or 2g (limits.memory)", func(v string) (err error) {
		r.memory, err = parseSize(v)
		return err
	})
	r.add(fl, []string{"cpus"}, "limit CPU time to `N` CPUs, such as 1.5 (limits.cpu)", func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
			return fmt.Errorf("%q is not a number of CPUs (expected a positive number such as 1 or 1.5)", v)
		}
		r.cpus = f
		return nil
	})
	r.add(fl, []string{"pids-limit"}, "at most `N` processes (limits.pids)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a number of processes (expected a whole number of at least 1)", v)
		}
		r.pids = n
		return nil
	})
	r.add(fl, []string{"timeout"}, "stop the command after `DURATION`, such as 30m or 1h30m (limits.timeout)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a duration (expected a positive duration such as 30m, 2h or 1h30m)", v)
		}
		r.timeout = d
		return nil
	})
	r.add(fl, []string{"network"}, "with `none`, no egress at all: the policy's network section and its credentials are dropped", func(v string) error {
		if v != "none" {
			return fmt.Errorf("%q: the only value is none (the policy's network section says what is reachable)", v)
		}
		r.noNet = true
		return nil
	})
	r.add(fl, []string{"workdir"}, "start the command in `DIR`, a directory of the workspace: absolute, or relative to it (sandbox.workdir)", func(v string) error {
		if v == "" {
			return errors.New("must not be empty")
		}
		r.workdir = v
		return nil
	})
	r.add(fl, []string{"isolation"}, "run the command in tier `TIER`: native (the default) or gvisor, gVisor's user-space kernel (needs runsc and root; sandbox.isolation)", func(v string) error {
		if v != policy.IsolationNative && v != policy.IsolationGVisor {
			return fmt.Errorf("%q is not an isolation tier (expected native or gvisor)", v)
		}
		r.isolation = v
		return nil
	})
	r.add(fl, []string{"backend"}, "run on `BACKEND`: native (this machine, the default) or kubernetes (a pod of the cluster the kubeconfig names, cloning --repo at --ref)", func(v string) error {
		if v != "native" && v != "kubernetes" {
			return fmt.Errorf("%q is not a backend (expected native or kubernetes)", v)
		}
		r.backend = v
		return nil
	})
	r.kube.register(r, fl)
	r.add(fl, []string{"name"}, "call the run `NAME` (shown by cordon runs)", func(v string) error {
		r.name = v
		return cordon.CheckName(v)
	})
}

// add registers parse under every name in names. A bad value is recorded rather than returned: the
// flag package would print it as "-name" in its own words.
func (r *runFlags) add(fl *flag.FlagSet, names []string, usage string, parse func(string) error) {
	for _, name := range names {
		fl.Func(name, usage, func(v string) error {
			if err := parse(v); err != nil && r.bad == nil {
				r.bad = fmt.Errorf("%s: %w", dashed(name), err)
			}
			return nil
		})
	}
}

// dashed writes a flag as the user would: -e, --env.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// parseVolume reads --volume's HOST[:PATH][:ro|rw]. HOST is checked as a policy path is (a relative
// one is taken from the current directory: a flag is typed in a shell); PATH as an entry's at is.
func parseVolume(v string) (volume, error) {
	parts := strings.Split(v, ":")
	var vol volume
	if n := len(parts); n > 1 && (parts[n-1] == "ro" || parts[n-1] == "rw") {
		vol.readOnly = parts[n-1] == "ro"
		parts = parts[:n-1]
	}
	switch len(parts) {
	case 1:
	case 2:
		vol.target = parts[1]
	default:
		return volume{}, fmt.Errorf("%q: expected HOST[:PATH][:ro] (a path with a colon cannot be given here)", v)
	}
	host := parts[0]
	if host != "" && host[0] != '/' && host[0] != '~' {
		abs, err := filepath.Abs(host)
		if err != nil {
			return volume{}, fmt.Errorf("%q: %w", v, err)
		}
		host = abs
	}
	vol.host = host
	if vol.target != "" {
		t, err := policy.CheckTarget(vol.target)
		if err != nil {
			return volume{}, fmt.Errorf("%q: the path inside: %w", v, err)
		}
		vol.target = t
	}
	return vol, nil
}

// parseSize reads a size as the policy does (512MiB, 2GiB, 1000000), and docker's lower-case
// single-letter units too (512m, 2g).
func parseSize(v string) (policy.ByteSize, error) {
	s := v
	if n := len(s); n > 1 && strings.IndexByte("bkmgt", s[n-1]) >= 0 && s[n-2] >= '0' && s[n-2] <= '9' {
		s = s[:n-1] + strings.ToUpper(s[n-1:])
	}
	b, err := policy.ParseByteSize(s)
	if err != nil || b == 0 {
		return 0, fmt.Errorf("%q is not a size (expected a positive size such as 512MiB, 2GiB or 1g)", v)
	}
	return b, nil
}

// parsePublish reads docker's -p form: [IP:]HOSTPORT:PORT, an IPv6 address in brackets.
func parsePublish(v string) (cordon.Publish, error) {
	bad := fmt.Errorf("%q is not [IP:]HOSTPORT:PORT (such as 8080:3000 or 0.0.0.0:8080:3000)", v)
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return cordon.Publish{}, bad
	}
	port, err := strconv.ParseUint(v[i+1:], 10, 16)
	if err != nil || port == 0 {
		return cordon.Publish{}, bad
	}
	host, hostPort := "127.0.0.1", v[:i]
	if j := strings.LastIndexByte(hostPort, ':'); j >= 0 {
		host, hostPort = strings.TrimSuffix(strings.TrimPrefix(hostPort[:j], "["), "]"), hostPort[j+1:]
	}
	hp, err := strconv.ParseUint(hostPort, 10, 16)
	if err != nil || hp == 0 {
		return cordon.Publish{}, bad
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return cordon.Publish{}, fmt.Errorf("%q: %q is not an IP address", v, host)
	}
	return cordon.Publish{Host: netip.AddrPortFrom(addr, uint16(hp)), Port: uint16(port)}, nil
}

// apply puts the flags into the policy for this run: a flag's value replaces the policy's, lists are
// extended. home expands ~ in --volume, project is the workspace that --workdir is resolved in.
func (r *runFlags) apply(pol *policy.Policy, home, project string) error {
	if r.noNet && len(r.allow) > 0 {
		return errors.New("--allow and --network none contradict each other")
	}
	if len(r.allow) > 0 {
		if pol.Network == nil {
			pol.Network = &policy.Network{}
		}
		pol.Network.Allow = append(pol.Network.Allow, r.allow...)
	}
	if r.noNet {
		// A credential is only ever used on requests to its hosts: without a network it has none.
		pol.Network, pol.Credentials = nil, nil
	}
	for _, kv := range r.env {
		k, v, set := strings.Cut(kv, "=")
		if set {
			if pol.Env.Set == nil {
				pol.Env.Set = make(map[string]string)
			}
			pol.Env.Set[k] = v
		} else {
			delete(pol.Env.Set, k) // env.set would win over env.pass
			if !slices.Contains(pol.Env.Pass, k) {
				pol.Env.Pass = append(pol.Env.Pass, k)
			}
		}
		if !slices.Contains(pol.Env.FromFlag, k) {
			pol.Env.FromFlag = append(pol.Env.FromFlag, k)
		}
		if slices.ContainsFunc(pol.Credentials, func(c policy.Credential) bool { return c.Name == k }) {
			return fmt.Errorf("--env %s: %s is a credential of the policy (its value never enters the sandbox's environment)", k, k)
		}
	}
	for _, vol := range r.volumes {
		p, err := policy.ExpandMount(vol.host, home)
		if err != nil {
			return fmt.Errorf("--volume: %w", err)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("--volume: %w", err)
		}
		// The flag's mode wins over the policy's for the same path.
		fs := &pol.Filesystem
		fs.ReadOnly = slices.DeleteFunc(fs.ReadOnly, func(s string) bool { return s == p })
		fs.ReadWrite = slices.DeleteFunc(fs.ReadWrite, func(s string) bool { return s == p })
		if vol.readOnly {
			fs.ReadOnly = append(fs.ReadOnly, p)
		} else {
			fs.ReadWrite = append(fs.ReadWrite, p)
		}
		delete(fs.Targets, p)
		if vol.target != "" && vol.target != p {
			if fs.Targets == nil {
				fs.Targets = make(map[string]string)
			}
			fs.Targets[p] = vol.target
		}
	}
	if r.memory > 0 {
		pol.Limits.Memory = r.memory
	}
	if r.cpus > 0 {
		pol.Limits.CPU = r.cpus
	}
	if r.pids > 0 {
		pol.Limits.Pids = r.pids
	}
	if r.timeout > 0 {
		pol.Limits.Timeout = r.timeout
	}
	if r.workdir != "" {
		rel, err := workdirFlag(r.workdir, project)
		if err != nil {
			return fmt.Errorf("--workdir: %w", err)
		}
		pol.Sandbox.Workdir = rel
	}
	return nil
}

// workdirFlag turns --workdir's DIR (absolute, or relative to the workspace) into sandbox.workdir's
// path relative to the workspace, refusing one outside it. The workspace is at its own path inside,
// so an absolute path means the same inside and out.
func workdirFlag(dir, project string) (string, error) {
	if filepath.IsAbs(dir) {
		real, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return "", err
		}
		rel, err := filepath.Rel(project, real)
		if err != nil || !within(real, project) {
			return "", fmt.Errorf("%s is not inside the workspace %s", dir, project)
		}
		dir = rel
	}
	rel, err := policy.CheckWorkdir(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(filepath.Join(project, rel))
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	return rel, nil
}
