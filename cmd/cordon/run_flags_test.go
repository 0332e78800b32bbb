//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/policy"
	"github.com/cordon-sandbox/cordon/internal/syncbuf"
)

// The per-run flags of cordon run: each one's effect seen from inside the sandbox, and every bad
// value refused with exit status 125 and one line naming the flag.

// realPath is p with links followed, as the sandbox shows the workspace.
func realPath(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunFlagEnv(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		r := h.cordon([]string{"PASSED=from-caller", "GITHUB_TOKEN=ghp_" + h.canary}, "",
			"run", "-e", "SET=one", "--env", "PASSED", "--env=TWO=a=b", "--", "sh", "-c", `echo "$SET|$PASSED|$TWO|${GITHUB_TOKEN:-unset}"`)
		if r.code != 0 || strings.TrimSpace(r.stdout) != "one|from-caller|a=b|unset" {
			t.Fatalf("-e/--env did not set and pass the variables (and nothing else):\n%s", r)
		}
		// The flag wins over the policy for the same variable, both ways.
		pol := h.policy("env:\n  set: {SET: policy, PASSED: policy}\n")
		r = h.cordon([]string{"PASSED=from-caller"}, "", "run", "--policy", pol, "-e", "SET=flag", "-e", "PASSED", "--", "sh", "-c", `echo "$SET|$PASSED"`)
		if r.code != 0 || strings.TrimSpace(r.stdout) != "flag|from-caller" {
			t.Fatalf("-e did not win over env.set:\n%s", r)
		}
		// A secret-shaped name passed by the flag is warned about as in env.pass.
		r = h.cordon([]string{"GITHUB_TOKEN=ghp_" + h.canary}, "", "run", "-e", "GITHUB_TOKEN", "--", "sh", "-c", `echo "$GITHUB_TOKEN"`)
		if r.code != 0 || !strings.Contains(r.stdout, h.canary) {
			t.Fatalf("-e GITHUB_TOKEN did not pass it:\n%s", r)
		}
		if !strings.Contains(r.stderr, "cordon: warning:") || !strings.Contains(r.stderr, "GITHUB_TOKEN into the sandbox (-e GITHUB_TOKEN)") {
			t.Errorf("no warning naming -e for a secret-shaped name passed with it:\n%s", r)
		}
		// The file's own names still name the file's section.
		pol = h.policy("env:\n  pass: [GITHUB_TOKEN]\n")
		r = h.cordon([]string{"GITHUB_TOKEN=ghp_" + h.canary}, "", "run", "--policy", pol, "--", "true")
		if r.code != 0 || !strings.Contains(r.stderr, "GITHUB_TOKEN into the sandbox (env.pass)") {
			t.Errorf("no warning naming env.pass for a name of the policy file:\n%s", r)
		}
	})
}

func TestRunFlagVolume(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		data := filepath.Join(h.base, "data")
		h.writeFile(filepath.Join(data, "f.txt"), "DATA-"+h.canary+"\n", 0o644)
		h.chownAll(data)
		// As root the agent writes as a reserved uid: let it (as the user would with chown or an ACL).
		os.Chmod(data, 0o777)

		r := h.cordon(nil, "", "run", "-v", data+":ro", "--", "sh", "-c",
			fmt.Sprintf("cat %s/f.txt; echo x > %s/new && echo WROTE", data, data))
		if !strings.Contains(r.stdout, "DATA-"+h.canary) {
			t.Fatalf("-v HOST:ro: the file is not visible inside:\n%s", r)
		}
		if strings.Contains(r.stdout, "WROTE") {
			t.Fatalf("-v HOST:ro: the path is writable inside:\n%s", r)
		}

		r = h.cordon(nil, "", "run", "--volume", data, "--", "sh", "-c", fmt.Sprintf("echo %s > %s/new", h.canary, data))
		if got, err := os.ReadFile(filepath.Join(data, "new")); r.code != 0 || err != nil || strings.TrimSpace(string(got)) != h.canary {
			t.Fatalf("--volume HOST: a write inside did not reach the host path (%v):\n%s", err, r)
		}

		// HOST:PATH shows it at PATH, and only there.
		r = h.cordon(nil, "", "run", "-v", data+":/opt/cordon-data:ro", "--", "sh", "-c",
			fmt.Sprintf("cat /opt/cordon-data/f.txt; ls %s 2>/dev/null && echo ALSO-AT-HOST-PATH; true", data))
		if r.code != 0 || !strings.Contains(r.stdout, "DATA-"+h.canary) || strings.Contains(r.stdout, "ALSO-AT-HOST-PATH") {
			t.Fatalf("-v HOST:PATH did not show the host path at PATH alone:\n%s", r)
		}
	})
}

// TestRunFlagVolumeIsPolicy: -v HOST:PATH is the file's {path: HOST, at: PATH}: applied to a policy
// it renders as that entry, and that rendering parses back to the same filesystem section.
func TestRunFlagVolumeIsPolicy(t *testing.T) {
	home := t.TempDir()
	data := filepath.Join(home, "data")
	other := filepath.Join(home, "other")
	for _, d := range []string{data, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var rf runFlags
	for _, v := range []string{"~/data:/opt/data:ro", other + ":/srv/other"} {
		vol, err := parseVolume(v)
		if err != nil {
			t.Fatal(err)
		}
		rf.volumes = append(rf.volumes, vol)
	}
	pol := policy.Default()
	if err := rf.apply(pol, home, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	file := fmt.Sprintf("version: 1\nfilesystem:\n  readonly: [{path: ~/data, at: /opt/data}]\n  readwrite: [{path: %s, at: /srv/other}]\n", other)
	want, err := policy.Parse("p.yaml", []byte(file), policy.Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pol.Filesystem, want.Filesystem) {
		t.Errorf("-v gave %+v\nthe file gives %+v", pol.Filesystem, want.Filesystem)
	}
	out, err := pol.Render()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "- path: "+data+"\n      at: /opt/data\n") {
		t.Errorf("the rendered policy does not show -v HOST:PATH as {path, at}:\n%s", out)
	}
	back, err := policy.Parse("rendered", out, policy.Options{})
	if err != nil || !reflect.DeepEqual(back.Filesystem, pol.Filesystem) {
		t.Errorf("rendered and read again: %v\n got %+v\nwant %+v\n%s", err, back.Filesystem, pol.Filesystem, out)
	}
}

// TestPolicyMountAt: the file's {path: HOST, at: PATH} shows the path at PATH inside as -v does,
// policy check shows it, and one over the workspace is refused by run and check alike, positioned.
func TestPolicyMountAt(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		data := filepath.Join(h.base, "data")
		h.writeFile(filepath.Join(data, "f.txt"), "DATA-"+h.canary+"\n", 0o644)
		h.chownAll(data)
		pol := h.policy(fmt.Sprintf("filesystem:\n  readonly: [{path: %s, at: /opt/cordon-data}]\n", data))
		r := h.cordon(nil, "", "run", "--policy", pol, "--", "cat", "/opt/cordon-data/f.txt")
		if r.code != 0 || !strings.Contains(r.stdout, "DATA-"+h.canary) {
			t.Fatalf("{path, at}: the path is not visible at at:\n%s", r)
		}
		r = h.cordon(nil, "", "policy", "check", "--workspace", h.ws, pol)
		if r.code != 0 || !strings.Contains(r.stdout, "- path: "+data+"\n      at: /opt/cordon-data\n") {
			t.Errorf("policy check does not show {path, at}:\n%s", r)
		}
		over := filepath.Join(realPath(t, h.ws), "sub")
		bad := h.policy(fmt.Sprintf("filesystem:\n  readonly:\n    - {path: %s, at: %s}\n", data, over))
		want := fmt.Sprintf("%s:4:%d: filesystem.readonly[0].at: %s is over the workspace", bad, 20+len(data), over)
		for _, args := range [][]string{{"run", "--policy", bad, "--", "true"}, {"policy", "check", "--workspace", h.ws, bad}} {
			if r := h.cordon(nil, "", args...); r.code == 0 || !strings.Contains(r.stderr, want) {
				t.Errorf("cordon %s: want an error containing %q:\n%s", args[0], want, r)
			}
		}
	})
}

func TestRunFlagNetworkNone(t *testing.T) {
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		port := upstream(t, h.canary)
		pol := h.policy(fmt.Sprintf("network:\n  allow:\n    - {host: pkg.test, ports: [%d]}\n  hosts: {pkg.test: 127.0.0.1}\n", port))
		probe := fmt.Sprintf("curl -sS -m 10 http://pkg.test:%d/ 2>&1; true", port)
		// Control: the policy's network does reach the host.
		if r := h.cordon(nil, "", "run", "--policy", pol, "--", "sh", "-c", probe); !strings.Contains(r.stdout, "UPSTREAM-"+h.canary) {
			t.Fatalf("control: the allowed host is not reached:\n%s", r)
		}
		r := h.cordon(nil, "", "run", "--policy", pol, "--network", "none", "--", "sh", "-c", probe)
		if r.code != 0 || strings.Contains(r.stdout, h.canary) {
			t.Fatalf("--network none: the policy's allowed host was reached:\n%s", r)
		}
	})
}

// TestRunFlagLimits: --memory and --pids-limit stop what exceeds them, through the cgroup or the
// rlimit fallback; --timeout stops the command.
func TestRunFlagLimits(t *testing.T) {
	const script = `dd if=/dev/zero of=/dev/null bs=200M count=1 2>/dev/null && echo ALLOC-OK
i=0; while [ $i -lt 60 ]; do sleep 2 & i=$((i+1)); done; echo FORKED $i`
	forEachTier(t, func(t *testing.T, h *harness) {
		// Control: without the flags the allocation and the processes fit.
		if r := h.cordon(nil, "", "run", "--", "sh", "-c", script); !strings.Contains(r.stdout, "ALLOC-OK") || !strings.Contains(r.stdout, "FORKED 60") {
			t.Skipf("control: this host does not run the probe without limits:\n%s", r)
		}
		// One flag a run: an out-of-memory kill of the whole run (memory.oom.group) would otherwise
		// end it before the fork loop, and the pids check could not fail.
		r := h.cordon(nil, "", "run", "--memory", "96m", "--", "sh", "-c", script)
		if strings.Contains(r.stdout, "ALLOC-OK") {
			t.Errorf("--memory 96m: 200MiB were allocated:\n%s", r)
		}
		r = h.cordon(nil, "", "run", "--pids-limit", "30", "--", "sh", "-c", script)
		if !strings.Contains(r.stdout, "ALLOC-OK") {
			t.Fatalf("--pids-limit alone: the allocation before the fork loop failed, so the loop proves nothing:\n%s", r)
		}
		if strings.Contains(r.stdout, "FORKED 60") {
			t.Errorf("--pids-limit 30: 60 processes were started:\n%s", r)
		}

		r = h.cordon(nil, "", "run", "--timeout", "1s", "--", "sleep", "60")
		if r.code == 0 || !strings.Contains(r.stderr, "stopped after 1s") {
			t.Errorf("--timeout 1s did not stop the command:\n%s", r)
		}
	})
}

// TestRunFlagCPUs: --cpus 0.5 is the run's cgroup CPU quota, read from the host while it runs (a
// quota cannot be seen from inside on a cgroup v1 host, and timing it would be flaky).
func TestRunFlagCPUs(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		cmd := h.command(nil, cordonBin, h.tierArgs([]string{"run", "--cpus", "0.5", "--", "sleep", "30"})...)
		stderr := &syncbuf.Buffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		defer func() { cmd.Process.Kill(); <-exited }()
		patterns := []string{
			"/sys/fs/cgroup/cpu/cordon-*/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu,cpuacct/cordon-*/cpu.cfs_quota_us",
			"/sys/fs/cgroup/cordon-*/cpu.max", "/sys/fs/cgroup/*/cordon-*/cpu.max", "/sys/fs/cgroup/*/*/cordon-*/cpu.max",
			"/sys/fs/cgroup/*/*/*/cordon-*/cpu.max", "/sys/fs/cgroup/*/*/*/*/cordon-*/cpu.max",
		}
		for {
			for _, pat := range patterns {
				files, _ := filepath.Glob(pat)
				for _, f := range files {
					if b, err := os.ReadFile(f); err == nil && (strings.TrimSpace(string(b)) == "50000" || strings.HasPrefix(string(b), "50000 100000")) {
						return // found: the quota is half a CPU
					}
				}
			}
			if strings.Contains(stderr.String(), "limits.cpu: no usable cgroup") {
				t.Skipf("no cgroup for this caller, so no CPU limit (the run says so):\n%s", stderr.String())
			}
			select {
			case <-exited:
				t.Fatalf("no cgroup of the run has a quota of half a CPU:\n%s", stderr.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

func TestRunFlagWorkdir(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		sub := filepath.Join(h.ws, "src", "pkg")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		h.chownAll(h.ws)
		want := realPath(t, sub)
		for _, dir := range []string{"src/pkg", sub} {
			r := h.cordon(nil, "", "run", "--workdir", dir, "--", "pwd")
			if r.code != 0 || strings.TrimSpace(r.stdout) != want {
				t.Errorf("--workdir %s: pwd is not %s:\n%s", dir, want, r)
			}
		}
		// The policy's field does the same, and the flag wins over it.
		pol := h.policy("sandbox:\n  workdir: src\n")
		if r := h.cordon(nil, "", "run", "--policy", pol, "--", "pwd"); r.code != 0 || strings.TrimSpace(r.stdout) != filepath.Dir(want) {
			t.Errorf("sandbox.workdir: src: pwd is not %s:\n%s", filepath.Dir(want), r)
		}
		if r := h.cordon(nil, "", "run", "--policy", pol, "--workdir", "src/pkg", "--", "pwd"); r.code != 0 || strings.TrimSpace(r.stdout) != want {
			t.Errorf("--workdir over sandbox.workdir: pwd is not %s:\n%s", want, r)
		}
	})
}

func TestRunFlagName(t *testing.T) {
	forEachIdentity(t, func(t *testing.T, h *harness) {
		if r := h.cordon(nil, "", "run", "--name", "fix-login.1", "--", "sh", "-c", "echo x > named.txt"); r.code != 0 {
			t.Fatalf("run --name:\n%s", r)
		}
		if r := h.cordon(nil, "", "runs"); !strings.Contains(r.stdout, "(fix-login.1)") {
			t.Errorf("runs does not show the run's name:\n%s", r)
		}
	})
}

// TestRunFlagBadValues: every bad value stops the run before anything starts, with exit status 125
// and one line that names the flag and what is wrong.
func TestRunFlagBadValues(t *testing.T) {
	h := newHarness(t, identities(t)[0])
	os.MkdirAll(filepath.Join(h.ws, "inside"), 0o755)
	h.writeFile(filepath.Join(h.ws, "file.txt"), "x\n", 0o644)
	outside := filepath.Join(h.base, "outside")
	os.MkdirAll(outside, 0o755)
	for _, tc := range []struct {
		args []string
		want string // in the one line
	}{
		{[]string{"-e", "1BAD"}, "-e: "},
		{[]string{"--env", "A-B=c"}, "--env: "},
		{[]string{"--memory", "lots"}, "--memory: \"lots\" is not a size"},
		{[]string{"--memory", "0"}, "--memory: "},
		{[]string{"--memory", "1.5g"}, "--memory: "},
		{[]string{"--cpus", "-1"}, "--cpus: "},
		{[]string{"--cpus", "NaN"}, "--cpus: "},
		{[]string{"--pids-limit", "0"}, "--pids-limit: "},
		{[]string{"--pids-limit", "ten"}, "--pids-limit: "},
		{[]string{"--timeout", "10"}, "--timeout: \"10\" is not a duration"},
		{[]string{"--timeout", "-5m"}, "--timeout: "},
		{[]string{"--network", "host"}, "--network: \"host\": the only value is none"},
		{[]string{"--network", "none", "--allow", "example.com"}, "--allow and --network none"},
		{[]string{"-v", "/a:/b:/c"}, "-v: "},
		{[]string{"-v", "/tmp:relative"}, "-v: "},
		{[]string{"-v", "/"}, "--volume: "},
		{[]string{"-v", "/does/not/exist"}, "--volume: "},
		{[]string{"-v", filepath.Join(h.ws, "inside")}, "inside the workspace"},
		{[]string{"-v", outside + ":" + filepath.Join(h.ws, "inside") + ":ro"}, "over the workspace"},
		{[]string{"--workdir", "/etc"}, "--workdir: /etc is not inside the workspace"},
		{[]string{"--workdir", "../x"}, "--workdir: "},
		{[]string{"--workdir", "missing"}, "--workdir: "},
		{[]string{"--workdir", "file.txt"}, "--workdir: file.txt is not a directory"},
		{[]string{"--name", "two words"}, "--name: "},
		{[]string{"--name", "-dash"}, "--name: "},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := h.cordon(nil, "", append(append([]string{"run"}, tc.args...), "--", "sh", "-c", "echo RAN")...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != exitCordon || strings.Contains(r.stdout, "RAN") || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Errorf("want exit %d and one line containing %q:\n%s", exitCordon, tc.want, r)
			}
		})
	}
}

// TestParseVolume: --volume's HOST[:PATH][:ro|rw] forms.
func TestParseVolume(t *testing.T) {
	wd, _ := os.Getwd()
	for _, tc := range []struct {
		in   string
		want volume
		err  bool
	}{
		{in: "/data", want: volume{host: "/data"}},
		{in: "/data:ro", want: volume{host: "/data", readOnly: true}},
		{in: "/data:rw", want: volume{host: "/data"}},
		{in: "/data:/mnt/d", want: volume{host: "/data", target: "/mnt/d"}},
		{in: "/data:/mnt/d/:ro", want: volume{host: "/data", target: "/mnt/d", readOnly: true}},
		{in: "~/x:ro", want: volume{host: "~/x", readOnly: true}},
		{in: "rel", want: volume{host: filepath.Join(wd, "rel")}},
		{in: "/data:mnt", err: true},
		{in: "/data:/", err: true},
		{in: "/a:/b:/c", err: true},
	} {
		got, err := parseVolume(tc.in)
		if (err != nil) != tc.err || err == nil && got != tc.want {
			t.Errorf("parseVolume(%q) = %+v, %v; want %+v (error: %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestParseSize: the policy's sizes, and docker's lower-case single-letter units.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]policy.ByteSize{
		"512MiB": 512 * policy.MiB, "2GiB": 2 * policy.GiB, "1000000": 1000000, "512m": 512 * policy.MiB,
		"1g": policy.GiB, "64k": 64 * policy.KiB, "100b": 100, "1G": policy.GiB,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "g", "1.5g", "1gb", "-1m", "lots"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

// TestParsePublish: docker's -p forms, the address 127.0.0.1 unless given, and the mistakes.
func TestParsePublish(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"8080:3000", "127.0.0.1:8080->3000", ""},
		{"0.0.0.0:8080:3000", "0.0.0.0:8080->3000", ""},
		{"[::1]:8080:3000", "[::1]:8080->3000", ""},
		{"3000", "", "is not [IP:]HOSTPORT:PORT"},
		{"8080:0", "", "is not [IP:]HOSTPORT:PORT"},
		{"x:8080:3000", "", `"x" is not an IP address`},
		{"8080:70000", "", "is not [IP:]HOSTPORT:PORT"},
	} {
		p, err := parsePublish(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if got := fmt.Sprintf("%s->%d", p.Host, p.Port); err != nil || got != tc.want {
			t.Errorf("%q: %s %v, want %s", tc.in, got, err, tc.want)
		}
	}
}
