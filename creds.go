package cordon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cordon-sandbox/cordon/internal/atomicfile"
	"github.com/cordon-sandbox/cordon/internal/credfiles"
	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/creds/awssig"
	"github.com/cordon-sandbox/cordon/internal/creds/githubapp"
	"github.com/cordon-sandbox/cordon/internal/creds/scan"
	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/presets"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/workspace"
)

// revokeTimeout bounds the revocation of minted tokens at the end of a run; a token that could not be
// revoked still expires on its own.
const revokeTimeout = 30 * time.Second

// prepareCredentials reads every credential the policy names (running commands and minting tokens
// outside the sandbox, before it starts) and makes their placeholders. A credential that cannot be
// read stops the run: the agent must not start without what it was promised.
//
// tokens are those the presets found in the tools' configuration (an npm registry's _authToken, a
// password in an index URL): each becomes a credential bound to its registry's host alone.
func (b *builder) prepareCredentials(ctx context.Context, pol *policy.Policy, tokens []presets.Token) (*creds.Set, error) {
	if len(pol.Credentials) == 0 && len(tokens) == 0 {
		return nil, nil
	}
	specs := make([]creds.Spec, 0, len(pol.Credentials)+len(tokens))
	for _, t := range tokens {
		value := t.Value
		specs = append(specs, creds.Spec{
			Name:   t.Name,
			Source: creds.SourceFuncs{Token: func(context.Context) (string, error) { return value, nil }},
			Inject: creds.Inject{Hosts: []string{t.Host}, Scheme: t.Scheme, Header: t.Header},
		})
	}
	for _, c := range pol.Credentials {
		if c.From.SSHAgent != nil {
			continue // not a value: the sandbox's agent socket (./sshagent.go)
		}
		sp := creds.Spec{Name: c.Name, Inject: creds.Inject{
			Hosts: c.Inject.Hosts, Header: c.Inject.Header, Scheme: string(c.Inject.Scheme), Body: c.Inject.Body, Ranges: c.Inject.Ranges,
		}}
		switch f := c.From; {
		case f.Env != "":
			sp.Source = creds.FromEnv(b.env, f.Env)
		case f.File != "":
			sp.Source = creds.FromFile(f.File)
		case len(f.Command) > 0:
			sp.Source = creds.FromCommand(f.Command, b.stdin, b.stderr)
		case f.GitHubApp != nil:
			src, err := b.githubApp(f.GitHubApp)
			if err != nil {
				return nil, fmt.Errorf("credential %s: %w", c.Name, err)
			}
			sp.Source = src
		case f.AWS != nil:
			if f.AWS.Env {
				sp.AWS = awssig.EnvKeys{Environ: b.env}
			} else {
				path := envValue(b.env, "AWS_SHARED_CREDENTIALS_FILE")
				if path == "" {
					path = filepath.Join(envValue(b.env, "HOME"), ".aws", "credentials")
				}
				sp.AWS = awssig.ProfileKeys{Path: path, Profile: f.AWS.Profile}
			}
			if r := f.AWS.AssumeRole; r != nil {
				// The run works with the role's session keys; the keys above sign only this call.
				sp.AWS = awssig.AssumeRole{
					Base: sp.AWS, RoleARN: r.RoleARN, Policy: r.SessionPolicy, Duration: r.Duration,
					Endpoint: r.Endpoint, Region: r.Region,
					SessionName: "cordon-" + time.Now().UTC().Format("20060102T150405Z"),
				}
			}
		}
		specs = append(specs, sp)
	}
	if len(specs) == 0 {
		return nil, nil
	}
	set, err := creds.Prepare(ctx, specs)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return set, nil
}

// githubApp makes the source of a GitHub App installation token, scoped to the policy's repositories
// and permissions: each use gets the current token (refreshed before it expires), and closing the
// source revokes every token it minted.
func (b *builder) githubApp(g *policy.GitHubApp) (creds.Source, error) {
	// Read as any credential file is: refused when other users can read it.
	key, err := creds.FromFile(g.PrivateKeyFile).Secret(context.Background())
	if err != nil {
		return nil, fmt.Errorf("GitHub App private key: %w", err)
	}
	src, err := githubapp.New(githubapp.Config{
		AppID: g.AppID, PrivateKeyPEM: []byte(key.Reveal()), InstallationID: g.InstallationID,
		Repositories: g.Repositories, Permissions: g.Permissions, BaseURL: g.APIURL,
	})
	if err != nil {
		return nil, err
	}
	return creds.SourceFuncs{Token: src.Token, Revoke: src.Revoke}, nil
}

// closeCredentials revokes what the run's credentials minted, on every way out of a run that
// prepared them.
func (b *builder) closeCredentials(set *creds.Set) {
	if set == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
	defer cancel()
	if err := set.Close(ctx); err != nil {
		b.warn.degraded(fmt.Sprintf("credentials: %v (a minted token still expires on its own)", err))
	}
}

// secretMasks scans the project for secret-shaped files and returns them as masks (absolute paths),
// after one line telling the user what was masked and how to allow it. filesystem.secrets.allow
// exempts files; filesystem.secrets.scan: false turns the scan off. The scan remembers each directory
// in cordon's state (which the sandbox never sees), so a large project costs a full read only once and
// a later start a stat per directory and per candidate file (scan.Cache). The
// full list of findings goes to the run's directory (runDir), which the line names when it cannot.
func (b *builder) secretMasks(ctx context.Context, project string, sec policy.Secrets, runDir string) ([]string, error) {
	if sec.NoScan {
		return nil, nil
	}
	cachePath := b.scanCachePath(project)
	cache := scan.NewCache()
	if f, err := os.Open(cachePath); err == nil {
		if c, err := scan.ReadCache(f); err == nil {
			cache = c
		}
		f.Close()
	}
	findings, err := scan.ScanTree(ctx, project, scan.Options{Allow: sec.Allow, Cache: cache})
	if err != nil {
		return nil, fmt.Errorf("scanning the workspace for secrets: %w", err)
	}
	if cache.Changed() {
		if err := writeCache(cachePath, cache); err != nil {
			b.warn.degraded(fmt.Sprintf("secret scan cache: %v (the next start scans every file again)", err))
		}
	}
	// A file git keeps as it is (its content in .git, readable there by `git show`) is not masked:
	// hiding it protects nothing, and an agent committing would commit it emptied.
	tracked := b.trackedUnchanged(project, scan.Paths(findings), cachePath+".tracked")
	var kept []scan.Finding
	if len(tracked) > 0 {
		findings = slices.DeleteFunc(findings, func(f scan.Finding) bool {
			if tracked[f.Path] {
				kept = append(kept, f)
			}
			return tracked[f.Path]
		})
	}
	listed := b.writeSecretListing(runDir, findings, kept)
	if paths := scan.Paths(kept); len(paths) > 0 {
		b.warn.notice(fmt.Sprintf("not masked: %d secret-shaped %s that git keeps unchanged (.git holds %s content, readable there anyway): %s; if a secret is real, rotate it",
			len(paths), plural(len(paths), "file", "files"), plural(len(paths), "its", "their"), strings.Join(paths[:min(3, len(paths))], ", ")+more(len(paths), 3, listed)))
	}
	paths := scan.Paths(findings)
	if len(paths) == 0 {
		return nil, nil
	}
	b.warn.notice(scan.Summary(findings, "filesystem.secrets.allow in the policy", listed))
	var masks []string
	for _, p := range paths {
		if t, ok := maskTarget(project, filepath.Join(project, filepath.FromSlash(p))); ok {
			masks = append(masks, t)
		}
	}
	return masks, nil
}

// trackedUnchanged is workspace.TrackedUnchanged with its memo kept in cordon's state beside the
// scan's cache, so that a start finding the repository as it was does not decode its index again.
func (b *builder) trackedUnchanged(project string, paths []string, memoPath string) map[string]bool {
	if len(paths) == 0 {
		return nil
	}
	var memo workspace.TrackedMemo
	old, err := os.ReadFile(memoPath)
	if err == nil && json.Unmarshal(old, &memo) != nil {
		memo = workspace.TrackedMemo{}
	}
	tracked := workspace.TrackedUnchanged(project, paths, &memo)
	if data, err := json.Marshal(memo); err == nil && !bytes.Equal(data, old) {
		if err := writeFileAtomic(memoPath, data); err != nil {
			b.warn.degraded(fmt.Sprintf("secret scan cache: %v", err))
		}
	}
	return tracked
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// more is " and N more" when n items were named only up to shown, and where all of them are listed.
func more(n, shown int, listed string) string {
	if n <= shown {
		return ""
	}
	if listed != "" {
		return fmt.Sprintf(" and %d more, all in %s", n-shown, listed)
	}
	return fmt.Sprintf(" and %d more", n-shown)
}

// secretListingName is the file in a run's directory that lists every finding of the secret scan: the
// one line printed at the start names only the first few.
const secretListingName = "masked-secrets.txt"

// writeSecretListing records every finding of the scan, masked and kept, in the run's directory and
// returns its path, or "" when there was nothing to list or it could not be written (the line then
// counts what it does not name, as before).
func (b *builder) writeSecretListing(runDir string, masked, kept []scan.Finding) string {
	if runDir == "" || len(masked)+len(kept) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if len(masked) > 0 {
		buf.WriteString("# masked: hidden from the agent\n")
		buf.Write(scan.Listing(masked))
	}
	if len(kept) > 0 {
		buf.WriteString("# not masked: git keeps these unchanged\n")
		buf.Write(scan.Listing(kept))
	}
	path := filepath.Join(runDir, secretListingName)
	if err := writeFileAtomic(path, buf.Bytes()); err != nil {
		b.warn.degraded(fmt.Sprintf("listing the masked files: %v", err))
		return ""
	}
	return path
}

// scanCachePath is where the secret scan's cache for project lives: in cordon's state, one file per
// project.
func (b *builder) scanCachePath(project string) string {
	sum := sha256.Sum256([]byte(project))
	return filepath.Join(b.store.Root, "scan-cache", hex.EncodeToString(sum[:12]))
}

// writeCache replaces the cache file atomically, so a crash leaves the old cache or the new one.
func writeCache(path string, c *scan.Cache) error {
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return err
	}
	return writeFileAtomic(path, b.Bytes())
}

// writeFileAtomic replaces the file at path (in a directory only cordon's user can enter) with b, so
// that a crash leaves the old content or the new. A cache needs no fsync: losing it costs a rescan.
func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteLazy(path, b, 0o600)
}

// warnCredentialMounts warns when a filesystem.readonly or readwrite path exposes a file where a tool
// keeps a long-lived credential (the path itself or something inside it): the agent can read it, which
// the credentials section exists to avoid. Only those well-known places are looked at (an lstat each),
// so a mount of a large tree costs nothing at start.
func (b *builder) warnCredentialMounts(mounts []sandbox.Mount) {
	home := b.home
	if h, err := filepath.EvalSymlinks(home); err == nil {
		home = h
	}
	if home == "" {
		return
	}
	for _, c := range credfiles.Home() {
		p := filepath.Join(home, c.Rel)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		for _, m := range mounts {
			if m.Target == "" && within(p, m.Source) {
				b.warn.degraded(fmt.Sprintf("filesystem: %s exposes %s (%s) to the agent; give it %s instead", m.Source, p, c.What, c.Instead))
				break
			}
		}
	}
}

// warnSecretValues warns about secret-shaped values that the policy passes into the sandbox's
// environment as they are (env.pass, env.set): those are the agent's to read and to leak.
func (b *builder) warnSecretValues(env []string, pol policy.Env) {
	var passed []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if _, set := pol.Set[name]; set || slices.Contains(pol.Pass, name) {
			passed = append(passed, kv)
		}
	}
	for _, f := range scan.ScanEnv(passed) {
		b.warn.degraded(fmt.Sprintf("$%s holds what looks like a %s and enters the sandbox as is; make it a credential to keep the value outside", f.Env, f.Kind))
	}
}
