package cordon

import (
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/egress/gateway"
	"github.com/cordon-sandbox/cordon/internal/javatrust"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

// gatewayEnv adds the gateway's variables (gateway.(*Gateway).Env) to env, which sandboxenv built from
// the policy's env.pass and env.set, and returns it with the PEM certificates of the policy's own CA
// bundles, which the sandbox must trust beside the gateway's TrustCA. A variable the policy set too is
// never replaced without a word:
//   - NO_PROXY and no_proxy: the policy's entries and the gateway's;
//   - a CA bundle variable (gateway.TrustVars, ExtraTrustVars): the certificates of the file it names
//     join the sandbox's bundle, to which the variable then points (a notice says so); a file cordon
//     cannot read or that holds no certificate is an error;
//   - JAVA_TOOL_OPTIONS: the policy's options, then the gateway's; options that name a trust store
//     themselves are an error;
//   - the proxy variables: the gateway's, with a notice (the gateway dials upstreams itself).
func (b *builder) gatewayEnv(env, add []string, pe policy.Env) ([]string, []byte, error) {
	index := map[string]int{}
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		index[k] = i
	}
	var extra []byte
	for _, kv := range add {
		k, ours, _ := strings.Cut(kv, "=")
		i, taken := index[k]
		if !taken {
			index[k] = len(env)
			env = append(env, kv)
			continue
		}
		_, theirs, _ := strings.Cut(env[i], "=")
		where := envOrigin(pe, k)
		switch {
		case theirs == ours:
		case k == "NO_PROXY" || k == "no_proxy":
			env[i] = k + "=" + joinList(theirs, ours)
		case slices.Contains(gateway.TrustVars, k) || slices.Contains(gateway.ExtraTrustVars, k):
			pemCerts, err := bundleCerts(theirs)
			if err != nil {
				return nil, nil, fmt.Errorf("%s %s: %w; put the CA into network.tls.caFile instead (the sandbox trusts it, as the gateway does)", where, k, err)
			}
			extra = append(extra, pemCerts...)
			env[i] = kv
			b.warn.notice(fmt.Sprintf("%s %s: the certificates of %s are in the sandbox's CA bundle, which %s names inside", where, k, theirs, k))
		case k == "JAVA_TOOL_OPTIONS":
			if strings.Contains(theirs, "javax.net.ssl.trustStore") {
				return nil, nil, fmt.Errorf("%s JAVA_TOOL_OPTIONS names a trust store; cordon gives Java one with the host's roots, network.tls.caFile and the run's CA: put the CA into network.tls.caFile and drop the trustStore options", where)
			}
			env[i] = k + "=" + theirs + " " + ours
		default:
			env[i] = kv
			b.warn.notice(fmt.Sprintf("%s %s: replaced by cordon's gateway proxy (%s); the gateway dials upstreams itself", where, k, ours))
		}
	}
	return env, extra, nil
}

// envOrigin names where the policy set k, for a message.
func envOrigin(pe policy.Env, k string) string {
	if slices.Contains(pe.FromFlag, k) {
		return "-e"
	}
	if _, ok := pe.Set[k]; ok {
		return "env.set"
	}
	return "env.pass"
}

// joinList joins two comma-separated lists, dropping repeats.
func joinList(a, b string) string {
	var out []string
	for _, e := range strings.Split(a+","+b, ",") {
		if e = strings.TrimSpace(e); e != "" && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return strings.Join(out, ",")
}

// bundleCerts reads the CA bundle a policy's variable names, on the host (an absolute path: the
// sandbox shows the system's files and the workspace at the same paths), and returns its
// certificates re-encoded as PEM; nothing else of the file goes into the sandbox's bundle.
func bundleCerts(path string) ([]byte, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%q is not an absolute path cordon can merge with the sandbox's bundle", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("merging it with the sandbox's bundle: %w", err)
	}
	var out []byte
	for _, c := range javatrust.PEMCertificates(b) {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate to merge with the sandbox's bundle", path)
	}
	return out, nil
}
