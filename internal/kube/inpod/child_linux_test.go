//go:build linux

package inpod

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// childEnv carries an agentChild to the test binary re-executed as the wrapper.
const childEnv = "CORDON_INPOD_TEST_AGENT"

// agentChild is one run of Agent in a child of the test: pid 1 of new pid and mount namespaces with
// a /proc of their own, as the wrapper is in its container. Agent's kill(-1) reaches only that
// namespace.
type agentChild struct {
	Dir, Base, OutDir string
	StopDir           string
	Attach            bool
	Args, Env         []string
	// Report is the file the child writes its agentReport to.
	Report string
	// HelloFD: the child writes a byte to fd 3 once the wrapper waits for the hello.
	HelloFD bool
}

// agentReport is what the child saw.
type agentReport struct {
	Code int
	Err  string
	// Alive lists the processes of the namespace other than the wrapper once Agent had returned.
	Alive []string
}

// agentChildMain is the child's side.
func agentChildMain() int {
	var c agentChild
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, "agent child:", err)
		return 3
	}
	// Refuse to kill(-1) anywhere but a pid namespace of the test's.
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "agent child: not pid 1 of a pid namespace of its own")
		return 3
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fmt.Fprintln(os.Stderr, "agent child:", err)
		return 3
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		fmt.Fprintln(os.Stderr, "agent child:", err)
		return 3
	}
	o := AgentOptions{Dir: c.Dir, Base: c.Base, OutDir: c.OutDir, StopDir: c.StopDir, Attach: c.Attach, Args: c.Args, Env: c.Env,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	if c.HelloFD {
		ready := os.NewFile(3, "hello-wait")
		o.helloWait = func() {
			ready.Write([]byte{1})
			ready.Close()
		}
	}
	code, err := Agent(context.Background(), o)
	r := agentReport{Code: code}
	if err != nil {
		r.Err = err.Error()
	}
	r.Alive = liveProcesses()
	b, _ := json.Marshal(r)
	if err := os.WriteFile(c.Report, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "agent child:", err)
		return 3
	}
	return 0
}

// liveProcesses lists the namespace's processes other than this one that have not ended, by their
// command lines.
func liveProcesses() []string {
	entries, _ := os.ReadDir("/proc")
	var alive []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || zombie(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		alive = append(alive, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	return alive
}

// agentCmd returns the command that runs c as a child; the caller sets its streams, starts it and
// reads the report with (*agentRun).report.
func agentCmd(t *testing.T, c agentChild) *agentRun {
	t.Helper()
	c.Report = filepath.Join(t.TempDir(), "report.json")
	if c.OutDir == "" {
		c.OutDir = t.TempDir()
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if uid := os.Geteuid(); uid != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	return &agentRun{Cmd: cmd, c: c}
}

// agentRun is a child running the wrapper.
type agentRun struct {
	*exec.Cmd
	c agentChild
}

// report waits for the child and returns its report.
func (r *agentRun) report(t *testing.T) agentReport {
	t.Helper()
	if err := r.Wait(); err != nil {
		t.Fatalf("agent child: %v", err)
	}
	return r.readReport(t)
}

// readReport reads the report of a child that has exited.
func (r *agentRun) readReport(t *testing.T) agentReport {
	t.Helper()
	b, err := os.ReadFile(r.c.Report)
	if err != nil {
		t.Fatalf("agent child wrote no report: %v", err)
	}
	var rep agentReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// outFile reads a file of the child's OutDir; "" and false when it is absent.
func (r *agentRun) outFile(t *testing.T, name string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.c.OutDir, name))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}
