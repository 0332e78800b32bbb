package kube

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// kubeconfig is the part of a kubeconfig file cordon reads: clusters, users and contexts, each by
// name, and the current context. Files in KUBECONFIG merge as kubectl merges them: the first file
// to name an entry wins, and the first current-context set wins.
type kubeconfig struct {
	CurrentContext string         `yaml:"current-context"`
	Clusters       []namedCluster `yaml:"clusters"`
	Users          []namedUser    `yaml:"users"`
	Contexts       []namedContext `yaml:"contexts"`
}

type namedCluster struct {
	Name    string `yaml:"name"`
	Cluster struct {
		Server                   string `yaml:"server"`
		CertificateAuthority     string `yaml:"certificate-authority"`
		CertificateAuthorityData string `yaml:"certificate-authority-data"`
		InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify"`
		TLSServerName            string `yaml:"tls-server-name"`
		ProxyURL                 string `yaml:"proxy-url"`
	} `yaml:"cluster"`
}

type namedUser struct {
	Name string   `yaml:"name"`
	User userInfo `yaml:"user"`
}

type userInfo struct {
	ClientCertificate     string      `yaml:"client-certificate"`
	ClientCertificateData string      `yaml:"client-certificate-data"`
	ClientKey             string      `yaml:"client-key"`
	ClientKeyData         string      `yaml:"client-key-data"`
	Token                 string      `yaml:"token"`
	TokenFile             string      `yaml:"tokenFile"`
	Username              string      `yaml:"username"`
	Password              string      `yaml:"password"`
	Exec                  *execConfig `yaml:"exec"`
	AuthProvider          *struct {
		Name string `yaml:"name"`
	} `yaml:"auth-provider"`
}

// execConfig is a credential plugin (client.authentication.k8s.io): how cloud clusters give tokens.
type execConfig struct {
	APIVersion string   `yaml:"apiVersion"`
	Command    string   `yaml:"command"`
	Args       []string `yaml:"args"`
	Env        []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	ProvideClusterInfo bool `yaml:"provideClusterInfo"`
}

type namedContext struct {
	Name    string `yaml:"name"`
	Context struct {
		Cluster   string `yaml:"cluster"`
		User      string `yaml:"user"`
		Namespace string `yaml:"namespace"`
	} `yaml:"context"`
}

// restConfig is how to reach one API server as one user.
type restConfig struct {
	Host      string // scheme://host:port, no trailing slash
	Namespace string
	Context   string
	TLS       *tls.Config
	Proxy     func(*http.Request) (*url.URL, error)
	auth      authenticator
}

// authenticator sets a request's credentials (a bearer token or basic auth), possibly asking a
// plugin first.
type authenticator interface {
	apply(ctx context.Context, r *http.Request) error
}

// loadConfig reads the kubeconfig as kubectl does: explicit, else KUBECONFIG (a list), else
// ~/.kube/config; then picks the context (the named one, else the current one).
func loadConfig(explicit, contextName, namespace string, env func(string) string) (*restConfig, error) {
	var files []string
	switch {
	case explicit != "":
		files = []string{explicit}
	case env("KUBECONFIG") != "":
		for _, f := range filepath.SplitList(env("KUBECONFIG")) {
			if f != "" {
				files = append(files, f)
			}
		}
	default:
		home := env("HOME")
		if home == "" {
			return nil, errors.New("no kubeconfig: KUBECONFIG is not set and there is no HOME for ~/.kube/config")
		}
		files = []string{filepath.Join(home, ".kube", "config")}
	}
	var merged kubeconfig
	read := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && explicit == "" && len(files) > 1 {
				continue // kubectl skips missing files of a KUBECONFIG list
			}
			return nil, fmt.Errorf("kubeconfig %s: %w", f, err)
		}
		var kc kubeconfig
		if err := yaml.Unmarshal(data, &kc); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", f, err)
		}
		merge(&merged, &kc, filepath.Dir(f))
		read++
	}
	if read == 0 {
		return nil, fmt.Errorf("no kubeconfig among %s", strings.Join(files, ", "))
	}
	name := contextName
	if name == "" {
		name = merged.CurrentContext
	}
	if name == "" {
		return nil, errors.New("the kubeconfig has no current context: name one with --context")
	}
	var ctx *namedContext
	for i := range merged.Contexts {
		if merged.Contexts[i].Name == name {
			ctx = &merged.Contexts[i]
			break
		}
	}
	if ctx == nil {
		return nil, fmt.Errorf("the kubeconfig has no context %q", name)
	}
	var cl *namedCluster
	for i := range merged.Clusters {
		if merged.Clusters[i].Name == ctx.Context.Cluster {
			cl = &merged.Clusters[i]
		}
	}
	if cl == nil {
		return nil, fmt.Errorf("context %q names the cluster %q, which the kubeconfig does not have", name, ctx.Context.Cluster)
	}
	var user userInfo
	for i := range merged.Users {
		if merged.Users[i].Name == ctx.Context.User {
			user = merged.Users[i].User
		}
	}
	c := &restConfig{Context: name, Namespace: cmp.Or(namespace, ctx.Context.Namespace, "default")}
	u, err := url.Parse(cl.Cluster.Server)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("cluster %q: server %q is not an http(s) URL", cl.Name, cl.Cluster.Server)
	}
	c.Host = strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/")
	c.TLS = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cl.Cluster.TLSServerName, InsecureSkipVerify: cl.Cluster.InsecureSkipTLSVerify}
	if ca, err := dataOrFile(cl.Cluster.CertificateAuthorityData, cl.Cluster.CertificateAuthority); err != nil {
		return nil, fmt.Errorf("cluster %q: certificate-authority: %w", cl.Name, err)
	} else if ca != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("cluster %q: certificate-authority holds no certificate", cl.Name)
		}
		c.TLS.RootCAs = pool
	}
	c.Proxy = http.ProxyFromEnvironment
	if cl.Cluster.ProxyURL != "" {
		pu, err := url.Parse(cl.Cluster.ProxyURL)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: proxy-url: %w", cl.Name, err)
		}
		c.Proxy = http.ProxyURL(pu)
	}
	cert, err := dataOrFile(user.ClientCertificateData, user.ClientCertificate)
	if err != nil {
		return nil, fmt.Errorf("user %q: client-certificate: %w", ctx.Context.User, err)
	}
	key, err := dataOrFile(user.ClientKeyData, user.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("user %q: client-key: %w", ctx.Context.User, err)
	}
	if cert != nil || key != nil {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("user %q: client certificate: %w", ctx.Context.User, err)
		}
		c.TLS.Certificates = []tls.Certificate{pair}
	}
	switch {
	case user.AuthProvider != nil:
		return nil, fmt.Errorf("user %q uses the auth-provider %q, which kubectl itself no longer supports: use its exec credential plugin", ctx.Context.User, user.AuthProvider.Name)
	case user.Exec != nil:
		c.auth = &execAuth{cfg: user.Exec, server: c.Host}
	case user.Token != "":
		c.auth = staticToken(user.Token)
	case user.TokenFile != "":
		c.auth = tokenFile(user.TokenFile)
	case user.Username != "":
		c.auth = basicAuth{user.Username, user.Password}
	}
	return c, nil
}

// merge adds kc's entries to m where m has none of that name yet; relative file paths are made
// absolute against the file's directory, as kubectl does.
func merge(m, kc *kubeconfig, dir string) {
	if m.CurrentContext == "" {
		m.CurrentContext = kc.CurrentContext
	}
	abs := func(p string) string {
		if p != "" && !filepath.IsAbs(p) {
			return filepath.Join(dir, p)
		}
		return p
	}
	have := func(names func(int) string, n int, name string) bool {
		for i := 0; i < n; i++ {
			if names(i) == name {
				return true
			}
		}
		return false
	}
	for _, c := range kc.Clusters {
		if !have(func(i int) string { return m.Clusters[i].Name }, len(m.Clusters), c.Name) {
			c.Cluster.CertificateAuthority = abs(c.Cluster.CertificateAuthority)
			m.Clusters = append(m.Clusters, c)
		}
	}
	for _, u := range kc.Users {
		if !have(func(i int) string { return m.Users[i].Name }, len(m.Users), u.Name) {
			u.User.ClientCertificate, u.User.ClientKey, u.User.TokenFile = abs(u.User.ClientCertificate), abs(u.User.ClientKey), abs(u.User.TokenFile)
			m.Users = append(m.Users, u)
		}
	}
	for _, c := range kc.Contexts {
		if !have(func(i int) string { return m.Contexts[i].Name }, len(m.Contexts), c.Name) {
			m.Contexts = append(m.Contexts, c)
		}
	}
}

func dataOrFile(data, file string) ([]byte, error) {
	switch {
	case data != "":
		return base64.StdEncoding.DecodeString(strings.TrimSpace(data))
	case file != "":
		return os.ReadFile(file)
	}
	return nil, nil
}

type staticToken string

func (t staticToken) apply(_ context.Context, r *http.Request) error {
	r.Header.Set("Authorization", "Bearer "+string(t))
	return nil
}

// tokenFile is read again for every request: the file is rotated (a projected service-account token).
type tokenFile string

func (f tokenFile) apply(_ context.Context, r *http.Request) error {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return fmt.Errorf("kubeconfig tokenFile: %w", err)
	}
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	return nil
}

type basicAuth struct{ user, password string }

func (b basicAuth) apply(_ context.Context, r *http.Request) error {
	r.SetBasicAuth(b.user, b.password)
	return nil
}

// execAuth runs the credential plugin and keeps its token until it expires.
type execAuth struct {
	cfg    *execConfig
	server string

	mu      sync.Mutex
	token   string
	expires time.Time
}

func (e *execAuth) apply(ctx context.Context, r *http.Request) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.token == "" || !e.expires.IsZero() && time.Now().After(e.expires.Add(-30*time.Second)) {
		if err := e.refresh(ctx); err != nil {
			return err
		}
	}
	r.Header.Set("Authorization", "Bearer "+e.token)
	return nil
}

func (e *execAuth) refresh(ctx context.Context) error {
	apiVersion := cmp.Or(e.cfg.APIVersion, "client.authentication.k8s.io/v1")
	in := map[string]any{"apiVersion": apiVersion, "kind": "ExecCredential", "spec": map[string]any{"interactive": false}}
	if e.cfg.ProvideClusterInfo {
		in["spec"].(map[string]any)["cluster"] = map[string]any{"server": e.server}
	}
	info, _ := json.Marshal(in)
	cmd := exec.CommandContext(ctx, e.cfg.Command, e.cfg.Args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_EXEC_INFO="+string(info))
	for _, v := range e.cfg.Env {
		cmd.Env = append(cmd.Env, v.Name+"="+v.Value)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("kubeconfig exec plugin %s: %w: %s", e.cfg.Command, err, strings.TrimSpace(stderr.String()))
	}
	var cred struct {
		Status struct {
			Token               string `json:"token"`
			ExpirationTimestamp string `json:"expirationTimestamp"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &cred); err != nil {
		return fmt.Errorf("kubeconfig exec plugin %s: its output: %w", e.cfg.Command, err)
	}
	if cred.Status.Token == "" {
		return fmt.Errorf("kubeconfig exec plugin %s gave no token (client certificates from plugins are not supported)", e.cfg.Command)
	}
	e.token = cred.Status.Token
	e.expires = time.Time{}
	if cred.Status.ExpirationTimestamp != "" {
		if t, err := time.Parse(time.RFC3339, cred.Status.ExpirationTimestamp); err == nil {
			e.expires = t
		}
	}
	return nil
}
