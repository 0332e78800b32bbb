//go:build linux

package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// TestNoOverlayThenRetry: an overlay the kernel refuses to mount (here an upper layer that is a
// file, not a directory) fails Start with ErrNoOverlay, whatever the message of the step, and the
// command does not run; Retry then starts a fresh box with the same launch and a plain workspace.
func TestNoOverlayThenRetry(t *testing.T) {
	base := t.TempDir()
	lower, layers, ws := filepath.Join(base, "project"), filepath.Join(base, "run"), filepath.Join(base, "ws")
	for _, d := range []string{lower, filepath.Join(layers, "work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(layers, "upper"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(base, "out")
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpecIn(ws, "sh", "-c", "echo ran > ran")
	spec.Workspace = sandbox.Workspace{Path: ws, Source: lower, Overlay: &sandbox.Overlay{Upper: filepath.Join(layers, "upper"), Work: filepath.Join(layers, "work")}}

	l, err := (&Backend{}).Launch(context.Background(), &sandbox.LaunchSpec{User: testUser, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Start(context.Background(), spec)
	var se *sandbox.SetupError
	if !errors.Is(err, sandbox.ErrNoOverlay) || !errors.As(err, &se) || se.Step != stepOverlay {
		t.Fatalf("Start = %v, want a SetupError at %q wrapping ErrNoOverlay", err, stepOverlay)
	}
	if strings.Contains(se.Err.Error(), sandbox.ErrNoOverlay.Error()) {
		t.Errorf("the step's error reads %q: it should read as the kernel's reason alone", se.Err)
	}
	if _, err := os.Stat(filepath.Join(lower, "ran")); err == nil {
		t.Fatal("the command ran although the workspace could not be mounted")
	}

	spec.Workspace = sandbox.Workspace{Path: ws, Source: lower}
	sb, err := l.Retry(context.Background(), spec)
	if err != nil {
		t.Fatalf("Retry: %v", err)
	}
	if st, err := sb.Wait(context.Background()); err != nil || st.Code != 0 {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("Wait = %+v, %v: %s", st, err, b)
	}
	if b, err := os.ReadFile(filepath.Join(lower, "ran")); err != nil || string(b) != "ran\n" {
		t.Fatalf("the retried command did not run in the plain workspace: %q %v", b, err)
	}
	// A second Retry is a second box: it is waited for, or its command would still be writing
	// into the workspace while the test's directories are removed.
	sb, err = l.Retry(context.Background(), spec)
	if err != nil {
		t.Fatalf("a second Retry after the failed Start: %v", err)
	}
	if st, err := sb.Wait(context.Background()); err != nil || st.Code != 0 {
		t.Errorf("the second Retry's box: Wait = %+v, %v", st, err)
	}
}

// TestRetryOnlyAfterAFailedStart: Retry is the way back from a failed Start, not a second run of a
// started box.
func TestRetryOnlyAfterAFailedStart(t *testing.T) {
	l, err := (&Backend{}).Launch(context.Background(), &sandbox.LaunchSpec{User: testUser})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Retry(context.Background(), testSpec(t, "true")); err == nil {
		t.Error("Retry before Start was accepted")
	}
	sb, err := l.Start(context.Background(), testSpec(t, "true"))
	if err != nil {
		t.Fatal(err)
	}
	sb.Wait(context.Background())
	if _, err := l.Start(context.Background(), testSpec(t, "true")); err == nil {
		t.Error("a second Start was accepted")
	}
	if _, err := l.Retry(context.Background(), testSpec(t, "true")); err == nil {
		t.Error("Retry after a successful Start was accepted")
	}
	l.Abort() // harmless after Start
}

// TestLaunchRefusesRoot: the sandbox user is checked once, at Launch.
func TestLaunchRefusesRoot(t *testing.T) {
	_, err := (&Backend{}).Launch(context.Background(), &sandbox.LaunchSpec{User: sandbox.User{UID: 0, GID: 0, Name: "root"}})
	var se *sandbox.SetupError
	if !errors.As(err, &se) || !strings.Contains(se.Err.Error(), "root") {
		t.Fatalf("Launch as root = %v, want a refusal", err)
	}
}

// TestStartHonoursContext: a context that has ended, or ends while the box is being built, tears
// the box down: Start returns a SetupError wrapping the context's error, and no process of the box
// is left (a command that did get to run is killed with it).
func TestStartHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := (&Backend{}).Launch(ctx, &sandbox.LaunchSpec{User: testUser}); !errors.Is(err, context.Canceled) {
		t.Errorf("Launch with an ended context = %v, want context.Canceled", err)
	}

	ws := t.TempDir()
	l, err := (&Backend{}).Launch(context.Background(), &sandbox.LaunchSpec{User: testUser})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Start(ctx, testSpecIn(ws, "sh", "-c", "touch ran"))
	var se *sandbox.SetupError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &se) {
		t.Fatalf("Start with an ended context = %v, want a SetupError wrapping context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Fatal("the command ran although the context had ended")
	}

	// Ending while init builds the boundary, at points from its first millisecond to after the
	// command runs.
	for i := range 8 {
		marker := fmt.Sprintf("%d.%03d", 6000+os.Getpid()%1000, i)
		l, err := (&Backend{}).Launch(context.Background(), &sandbox.LaunchSpec{User: testUser})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(3*i)*time.Millisecond, cancel)
		sb, err := l.Start(ctx, testSpecIn(t.TempDir(), "sleep", marker))
		t.Logf("run %d (cancel after %dms): Start = %v", i, 3*i, err)
		if err == nil {
			// Started before the cancel landed: Start must then have seen it too, unless it came
			// after Start returned, which a Wait with the same context still honours.
			if _, werr := sb.Wait(ctx); !errors.Is(werr, context.Canceled) {
				t.Fatalf("run %d: Start succeeded and Wait = %v, want context.Canceled", i, werr)
			}
		} else if !errors.Is(err, context.Canceled) || !errors.As(err, &se) {
			t.Fatalf("run %d: Start = %v, want a SetupError wrapping context.Canceled", i, err)
		}
		if pid := findSleep(t, marker); pid != "" {
			t.Fatalf("run %d: the box's command %s is still running after the cancelled start", i, pid)
		}
		cancel()
	}

	// A context that ends after Start returned bounds nothing any more: the command runs on. It
	// waits on its stdin until the context has ended, then lives 200ms more, time enough for a
	// kill still armed by Start to land.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	l, err = (&Backend{}).Launch(context.Background(), &sandbox.LaunchSpec{User: testUser, Stdin: r})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	ctx, cancel = context.WithCancel(context.Background())
	ws = t.TempDir()
	sb, err := l.Start(ctx, testSpecIn(ws, "sh", "-c", "read x; sleep 0.2; touch done"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	w.Write([]byte("go\n"))
	w.Close()
	st, err := sb.Wait(context.Background())
	if err != nil || st.Code != 0 || st.Signal != nil {
		t.Fatalf("a command whose Start context ended after it started: Wait = %+v, %v; want exit 0", st, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "done")); err != nil {
		t.Fatalf("the command did not finish: %v", err)
	}
}

// TestWaitHonoursContext: a Wait whose context ends kills the box and returns the context's error,
// with nothing of the box left; the status says the command was killed.
func TestWaitHonoursContext(t *testing.T) {
	marker := fmt.Sprintf("%d.%03d", 7000+os.Getpid()%1000, time.Now().Nanosecond()%1000)
	sb, err := start(&sandbox.LaunchSpec{}, testSpec(t, "sleep", marker))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); findSleep(t, marker) == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			sb.Kill()
			t.Fatal("the command never showed on the host")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	st, err := sb.Wait(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %+v, %v; want context.DeadlineExceeded", st, err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Wait took %v after its context ended", took)
	}
	if st.Code != 128+9 {
		t.Errorf("status %+v, want killed (137)", st)
	}
	if pid := findSleep(t, marker); pid != "" {
		t.Fatalf("the command %s is still running after Wait's context ended", pid)
	}
	// A second Wait reports the same end.
	if st2, _ := sb.Wait(context.Background()); st2.Code != st.Code {
		t.Errorf("second Wait = %+v, want %+v", st2, st)
	}
}

// TestInitRefusesABadConfig: init decodes its config on a goroutine beside the root's first steps;
// a config it cannot read as one (not JSON, a field it does not know, another message, nothing at
// all) must still end init with 125 and the step named, before anything of the command's runs, and
// with or without the gateway's second goroutine at work.
func TestInitRefusesABadConfig(t *testing.T) {
	good, err := encodeMsg(&initConfig{})
	if err != nil {
		t.Fatal(err)
	}
	started, err := encodeMsg(&startedMsg{})
	if err != nil {
		t.Fatal(err)
	}
	unknown := []byte(strings.Replace(string(good), `"body":{`, `"body":{"Smuggled":true,`, 1))
	if string(unknown) == string(good) {
		t.Fatalf("no body to add a field to in %s", good)
	}
	for _, tc := range []struct {
		name, want string
		config     []byte
	}{
		{"not JSON", "", []byte("{")},
		{"an unknown field", "Smuggled", unknown},
		{"another message", "instead of the config", started},
		{"nothing", "", nil},
	} {
		for _, egress := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/egress=%v", tc.name, egress), func(t *testing.T) {
				ls := &sandbox.LaunchSpec{User: testUser}
				if egress {
					ls.Egress = &sandbox.EgressPorts{Transparent: 15001, Proxy: 3128, DNS: 53}
				}
				box, err := (&Backend{}).Launch(context.Background(), ls)
				if err != nil {
					t.Fatal(err)
				}
				l := box.(*launched)
				if _, err := l.cfgW.Write(tc.config); err != nil {
					t.Fatal(err)
				}
				l.cfgW.Close()
				m, err := l.s.readStatus(l.statR)
				<-l.s.done
				box.Abort() // what a failed start leaves: init's channels, its cgroup, the ids' namespace
				if err != nil {
					t.Fatalf("reading init's status: %v", err)
				}
				f, ok := m.(*failedMsg)
				if !ok {
					t.Fatalf("init answered %T (%+v), want a failure", m, m)
				}
				if f.Step != "reading the sandbox config" || !strings.Contains(f.Error, tc.want) {
					t.Errorf("init failed at %q (%s), want %q mentioning %q", f.Step, f.Error, "reading the sandbox config", tc.want)
				}
				if ws := l.s.waitStatus; !ws.Exited() || ws.ExitStatus() != 125 {
					t.Errorf("init ended with %v, want exit 125", ws)
				}
			})
		}
	}
}
