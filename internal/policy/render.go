package policy

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Render writes the effective policy as YAML in the file's own schema (paths expanded, defaults filled
// in), for `cordon policy check`. Its output parses back to an equal Policy.
func (p *Policy) Render() ([]byte, error) {
	var n yaml.Node
	if err := n.Encode(p.doc()); err != nil {
		return nil, fmt.Errorf("render policy: %w", err)
	}
	n.HeadComment = "Effective policy, from " + p.Source
	if p.Network == nil {
		n.HeadComment += "\nNo network section: the sandbox has no egress at all."
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return nil, fmt.Errorf("render policy: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("render policy: %w", err)
	}
	return buf.Bytes(), nil
}

// The types below mirror the file's schema for encoding only; Parse never decodes into them.

type docPolicy struct {
	Version     int             `yaml:"version"`
	Filesystem  docFilesystem   `yaml:"filesystem,omitempty"`
	Env         docEnv          `yaml:"env,omitempty"`
	Limits      docLimits       `yaml:"limits,omitempty"`
	Sandbox     docSandbox      `yaml:"sandbox"`
	Network     *docNetwork     `yaml:"network,omitempty"`
	Credentials []docCredential `yaml:"credentials,omitempty"`
	Budgets     []docBudget     `yaml:"budgets,omitempty"`
	Services    *yaml.Node      `yaml:"services,omitempty"`
}

type docFilesystem struct {
	ReadOnly  []any       `yaml:"readonly,omitempty"` // a path, or a docMount for one shown elsewhere
	ReadWrite []any       `yaml:"readwrite,omitempty"`
	Deny      []string    `yaml:"deny,omitempty"`
	Secrets   *docSecrets `yaml:"secrets,omitempty"`
	Caches    *[]string   `yaml:"caches,omitempty"`
}

type docMount struct {
	Path string `yaml:"path"`
	At   string `yaml:"at"`
}

type docSecrets struct {
	Scan  bool     `yaml:"scan"`
	Allow []string `yaml:"allow,omitempty"`
}

type docEnv struct {
	Pass []string          `yaml:"pass,omitempty"`
	Set  map[string]string `yaml:"set,omitempty"`
}

type docLimits struct {
	Memory    string  `yaml:"memory,omitempty"`
	Pids      int64   `yaml:"pids,omitempty"`
	CPU       float64 `yaml:"cpu,omitempty"`
	Timeout   string  `yaml:"timeout,omitempty"`
	OpenFiles uint64  `yaml:"openFiles,omitempty"`
	Disk      string  `yaml:"disk,omitempty"`
}

type docSandbox struct {
	AllowNesting bool   `yaml:"allowNesting"`
	Hostname     string `yaml:"hostname"`
	Workdir      string `yaml:"workdir,omitempty"`
}

type docNetwork struct {
	Allow   []any             `yaml:"allow,omitempty"`
	Deny    []string          `yaml:"deny,omitempty"`
	Hosts   map[string]string `yaml:"hosts,omitempty"`
	Presets []string          `yaml:"presets,omitempty"`
	DNS     struct {
		Upstream []string `yaml:"upstream,omitempty"`
	} `yaml:"dns,omitempty"`
	TLS struct {
		CAFile  string `yaml:"caFile,omitempty"`
		Inspect any    `yaml:"inspect,omitempty"` // InspectAll or the list of hosts
	} `yaml:"tls,omitempty"`
	HTTP []docHTTPRule `yaml:"http,omitempty"`
	Git  []docGitRule  `yaml:"git,omitempty"`
}

type docEndpoint struct {
	Host  string   `yaml:"host"`
	Ports []uint16 `yaml:"ports,flow"`
}

type docHTTPRule struct {
	Host  string         `yaml:"host"`
	Allow []docHTTPAllow `yaml:"allow"`
}

type docHTTPAllow struct {
	Methods   []string `yaml:"methods,flow"`
	Paths     []string `yaml:"paths"`
	Body      bool     `yaml:"body,omitempty"`
	Websocket bool     `yaml:"websocket,omitempty"`
	Headers   []string `yaml:"headers,omitempty,flow"`
}

type docCredential struct {
	Name   string     `yaml:"name"`
	From   docSource  `yaml:"from"`
	Inject *docInject `yaml:"inject,omitempty"` // nil for an sshAgent credential, which has none
}

type docSource struct {
	Env       string        `yaml:"env,omitempty"`
	File      string        `yaml:"file,omitempty"`
	Command   []string      `yaml:"command,omitempty,flow"`
	GitHubApp *docGitHubApp `yaml:"githubApp,omitempty"`
	AWS       *docAWS       `yaml:"aws,omitempty"`
	SSHAgent  *docSSHAgent  `yaml:"sshAgent,omitempty"`
}

type docSSHAgent struct {
	Keys []string `yaml:"keys"`
}

type docAWS struct {
	Profile    string         `yaml:"profile,omitempty"`
	Env        bool           `yaml:"env,omitempty"`
	AssumeRole *docAssumeRole `yaml:"assumeRole,omitempty"`
}

type docAssumeRole struct {
	RoleARN       string `yaml:"roleArn"`
	SessionPolicy string `yaml:"sessionPolicy,omitempty"`
	Duration      string `yaml:"duration,omitempty"`
	Endpoint      string `yaml:"endpoint,omitempty"`
	Region        string `yaml:"region,omitempty"`
}

type docGitHubApp struct {
	AppID          int64             `yaml:"appId"`
	PrivateKeyFile string            `yaml:"privateKeyFile"`
	InstallationID int64             `yaml:"installationId"`
	Repositories   []string          `yaml:"repositories"`
	Permissions    map[string]string `yaml:"permissions"`
	APIURL         string            `yaml:"apiURL,omitempty"`
}

type docInject struct {
	Host   any    `yaml:"host"`
	Header string `yaml:"header,omitempty"`
	Scheme Scheme `yaml:"scheme,omitempty"`
	Body   bool   `yaml:"body,omitempty"`
	Ranges bool   `yaml:"ranges,omitempty"`
}

func (p *Policy) doc() docPolicy {
	d := docPolicy{
		Version: p.Version,
		Filesystem: docFilesystem{
			ReadOnly:  p.Filesystem.docMounts(p.Filesystem.ReadOnly),
			ReadWrite: p.Filesystem.docMounts(p.Filesystem.ReadWrite),
			Deny:      p.Filesystem.Deny,
		},
		Env: docEnv{Pass: p.Env.Pass, Set: p.Env.Set},
		Limits: docLimits{
			Pids:      p.Limits.Pids,
			CPU:       p.Limits.CPU,
			OpenFiles: p.Limits.OpenFiles,
		},
		Sandbox: docSandbox{AllowNesting: p.Sandbox.AllowNesting, Hostname: p.Sandbox.Hostname, Workdir: p.Sandbox.Workdir},
	}
	if p.Filesystem.CachesSet {
		c := append([]string{}, p.Filesystem.Caches...)
		d.Filesystem.Caches = &c
	}
	if sec := p.Filesystem.Secrets; sec.NoScan || len(sec.Allow) > 0 {
		d.Filesystem.Secrets = &docSecrets{Scan: !sec.NoScan, Allow: sec.Allow}
	}
	if p.Limits.Memory != 0 {
		d.Limits.Memory = p.Limits.Memory.String()
	}
	if p.Limits.Disk != 0 {
		d.Limits.Disk = p.Limits.Disk.String()
	}
	if p.Limits.Timeout != 0 {
		d.Limits.Timeout = formatDuration(p.Limits.Timeout)
	}
	if nw := p.Network; nw != nil {
		dn := &docNetwork{Deny: nw.Deny, Presets: nw.Presets}
		for _, ep := range nw.Allow {
			if slices.Equal(ep.Ports, []uint16{443}) {
				dn.Allow = append(dn.Allow, ep.Host)
			} else {
				dn.Allow = append(dn.Allow, docEndpoint(ep))
			}
		}
		for name, addr := range nw.Hosts {
			if dn.Hosts == nil {
				dn.Hosts = make(map[string]string)
			}
			dn.Hosts[name] = addr.String()
		}
		for _, u := range nw.DNS.Upstream {
			dn.DNS.Upstream = append(dn.DNS.Upstream, u.String())
		}
		dn.TLS.CAFile = nw.TLS.CAFile
		switch {
		case nw.TLS.InspectAll:
			dn.TLS.Inspect = InspectAll
		case len(nw.TLS.Inspect) > 0:
			dn.TLS.Inspect = nw.TLS.Inspect
		}
		for _, r := range nw.HTTP {
			dr := docHTTPRule{Host: r.Host}
			for _, a := range r.Allow {
				dr.Allow = append(dr.Allow, docHTTPAllow(a))
			}
			dn.HTTP = append(dn.HTTP, dr)
		}
		dn.Git = docGitRules(nw.Git)
		d.Network = dn
	}
	for _, c := range p.Credentials {
		dc := docCredential{
			Name: c.Name,
			From: docSource{Env: c.From.Env, File: c.From.File, Command: c.From.Command},
		}
		if a := c.From.SSHAgent; a != nil {
			dc.From.SSHAgent = &docSSHAgent{Keys: a.Keys}
		} else {
			dc.Inject = &docInject{
				Host: c.Inject.Hosts, Header: c.Inject.Header, Scheme: c.Inject.Scheme, Body: c.Inject.Body, Ranges: c.Inject.Ranges,
			}
			if len(c.Inject.Hosts) == 1 {
				dc.Inject.Host = c.Inject.Hosts[0]
			}
		}
		if a := c.From.AWS; a != nil {
			dc.From.AWS = &docAWS{Profile: a.Profile, Env: a.Env}
			if r := a.AssumeRole; r != nil {
				dr := &docAssumeRole{RoleARN: r.RoleARN, SessionPolicy: r.SessionPolicy, Endpoint: r.Endpoint, Region: r.Region}
				if r.Duration != 0 {
					dr.Duration = formatDuration(r.Duration)
				}
				dc.From.AWS.AssumeRole = dr
			}
		}
		if g := c.From.GitHubApp; g != nil {
			dg := docGitHubApp(*g)
			dc.From.GitHubApp = &dg
		}
		d.Credentials = append(d.Credentials, dc)
	}
	d.Budgets = docBudgets(p.Budgets)
	d.Services = docServices(p.Services)
	return d
}

// docMounts writes readonly or readwrite: a path shown at its own path as a string, one shown
// elsewhere (Targets) as {path: HOST, at: PATH}.
func (fs Filesystem) docMounts(paths []string) []any {
	var out []any
	for _, p := range paths {
		if at, ok := fs.Targets[p]; ok {
			out = append(out, docMount{Path: p, At: at})
		} else {
			out = append(out, p)
		}
	}
	return out
}

// formatDuration drops the zero minutes and seconds time.Duration.String adds ("2h0m0s" is "2h").
func formatDuration(t time.Duration) string {
	s := t.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
