package linux

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cordon-sandbox/cordon/internal/sandbox"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/cgroup"
)

// ReaperArg0 is argv[0] of the re-executed cgroup reaper; the cordon binary's main dispatches on it.
const ReaperArg0 = "cordon-cgroup-reaper"

// initCaps are the capabilities init keeps across its exec, over its own namespaces only (they mean
// nothing on the host): enough to build the root, configure loopback, and then drop them all.
var initCaps = []uintptr{
	unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP, unix.CAP_NET_ADMIN, unix.CAP_SYS_CHROOT,
	unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER, unix.CAP_CHOWN, unix.CAP_SYS_RESOURCE,
}

// Backend is the native Linux backend.
type Backend struct {
	// Exe is the cordon binary to re-execute as init and reaper; /proc/self/exe when empty.
	Exe string
	// Warn receives one-line warnings about layers this host cannot provide.
	Warn func(string)
	// RunName names the run's cgroup ("cordon-<run id>").
	RunName string
}

var _ sandbox.Backend = (*Backend)(nil)

func (b *Backend) warn(s string) {
	if b.Warn != nil {
		b.Warn(s)
	}
}

// Start implements sandbox.Backend.
func (b *Backend) Start(ctx context.Context, spec *sandbox.Spec) (sandbox.Sandbox, error) {
	if err := validate(spec); err != nil {
		return nil, &sandbox.SetupError{Step: "checking the sandbox spec", Err: err}
	}
	exe := b.Exe
	if exe == "" {
		exe = "/proc/self/exe"
	}
	etc, err := etcEntries(spec)
	if err != nil {
		return nil, &sandbox.SetupError{Step: "reading /etc", Err: err}
	}
	cfg := initConfig{Spec: *spec, Etc: etc, LandlockABI: LandlockABI()}

	s := &running{done: make(chan struct{}), timeout: spec.Limits.Timeout, warn: b.warn}
	l := spec.Limits
	if l.MemoryBytes > 0 || l.Pids > 0 || l.CPU > 0 {
		name := b.RunName
		if name == "" {
			name = fmt.Sprintf("cordon-%d-%d", os.Getpid(), time.Now().UnixNano())
		}
		g, unenforced, err := cgroup.New(name, cgroup.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPU: l.CPU})
		if err != nil {
			unenforced = []string{"memory", "pids", "cpu"}
			g = nil
		}
		for _, u := range unenforced {
			switch {
			case u == "pids" && l.Pids > 0:
				cfg.SetRlimitNproc = true
				b.warn(fmt.Sprintf("limits.pids: no usable cgroup here (%v); falling back to RLIMIT_NPROC", errOr(err, "controller not available")))
			case u == "memory" && l.MemoryBytes > 0:
				cfg.RlimitAS = uint64(l.MemoryBytes)
				b.warn(fmt.Sprintf("limits.memory: no usable cgroup here (%v); falling back to RLIMIT_AS per process", errOr(err, "controller not available")))
			case u == "cpu" && l.CPU > 0:
				b.warn(fmt.Sprintf("limits.cpu: no usable cgroup here (%v); CPU is not limited", errOr(err, "controller not available")))
			}
		}
		if g != nil {
			keepalive, err := cgroup.StartReaper(exe, []string{ReaperArg0}, g)
			if err != nil {
				g.Destroy()
				return nil, &sandbox.SetupError{Step: "starting the cgroup reaper", Err: err}
			}
			s.cgroup, s.keepalive = g, keepalive
		}
	}
	if err := s.start(exe, &cfg); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func errOr(err error, s string) any {
	if err != nil {
		return err
	}
	return s
}

func validate(spec *sandbox.Spec) error {
	if len(spec.Args) == 0 {
		return errors.New("no command")
	}
	ws := spec.Workspace
	if !filepath.IsAbs(ws.Path) || !filepath.IsAbs(ws.Source) {
		return fmt.Errorf("workspace %q: not an absolute path", ws.Path)
	}
	for _, m := range spec.Mounts {
		if !filepath.IsAbs(m.Source) {
			return fmt.Errorf("mount %q: not an absolute path", m.Source)
		}
	}
	if spec.User.UID == 0 {
		return errors.New("the sandbox user must not be root")
	}
	return nil
}

// running is a started sandbox.
type running struct {
	cmd       *exec.Cmd
	cgroup    *cgroup.Group
	keepalive *os.File
	timeout   time.Duration
	warn      func(string)

	mu       sync.Mutex
	timedOut bool
	done     chan struct{}
}

func (s *running) start(exe string, cfg *initConfig) error {
	spec := &cfg.Spec
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return &sandbox.SetupError{Step: "creating the config pipe", Err: err}
	}
	defer cfgR.Close()
	defer cfgW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		return &sandbox.SetupError{Step: "creating the status pipe", Err: err}
	}
	defer statR.Close()

	hostUID, hostGID := os.Getuid(), os.Getgid()
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{InitArg0},
		Env:        []string{},
		Stdin:      spec.Stdin,
		Stdout:     spec.Stdout,
		Stderr:     spec.Stderr,
		ExtraFiles: []*os.File{cfgR, statW},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: spec.User.UID, HostID: hostUID, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: spec.User.GID, HostID: hostGID, Size: 1}},
			GidMappingsEnableSetgroups: false,
			AmbientCaps:                initCaps,
			// If cordon dies by any means, the kernel kills init, and with pid 1 gone every process
			// of the sandbox's pid namespace dies with it.
			Pdeathsig: syscall.SIGKILL,
			Setsid:    true,
		},
	}
	if err := cmd.Start(); err != nil {
		statW.Close()
		return &sandbox.SetupError{Step: "creating the namespaces", Err: fmt.Errorf("%w (does this kernel allow user namespaces? see `cordon doctor`)", err)}
	}
	statW.Close()
	s.cmd = cmd
	go s.wait()

	if s.cgroup != nil {
		if err := s.cgroup.Add(cmd.Process.Pid); err != nil {
			s.Kill()
			<-s.done
			return &sandbox.SetupError{Step: "joining the run's cgroup", Err: err}
		}
	}
	if err := json.NewEncoder(cfgW).Encode(cfg); err != nil {
		s.Kill()
		<-s.done
		return &sandbox.SetupError{Step: "sending the sandbox config", Err: err}
	}
	cfgW.Close()

	line, err := bufio.NewReader(statR).ReadBytes('\n')
	var st status
	if err == nil {
		err = json.Unmarshal(line, &st)
	}
	switch {
	case err != nil:
		s.Kill()
		<-s.done
		return &sandbox.SetupError{Step: "starting init", Err: fmt.Errorf("init ended before reporting: %s", s.cmd.ProcessState)}
	case st.Error != "":
		<-s.done
		return &sandbox.SetupError{Step: st.Step, Err: errors.New(st.Error)}
	case st.Exec != "":
		<-s.done
		return &sandbox.ExecError{Path: spec.Args[0], NotFound: st.NotFound, Err: errors.New(st.Exec)}
	}
	for _, w := range st.Warnings {
		s.warn(w)
	}
	if s.timeout > 0 {
		t := time.AfterFunc(s.timeout, func() {
			s.mu.Lock()
			s.timedOut = true
			s.mu.Unlock()
			s.Kill()
		})
		go func() { <-s.done; t.Stop() }()
	}
	return nil
}

func (s *running) wait() {
	s.cmd.Wait()
	close(s.done)
}

func (s *running) cleanup() {
	if s.cgroup != nil {
		s.cgroup.Destroy()
	}
	if s.keepalive != nil {
		s.keepalive.Close()
	}
}

// Wait implements sandbox.Sandbox.
func (s *running) Wait() (sandbox.ExitStatus, error) {
	<-s.done
	defer s.cleanup()
	var st sandbox.ExitStatus
	ws, _ := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		st.Code = ws.ExitStatus()
		if st.Code > 128 && st.Code < 128+65 {
			st.Signal = syscall.Signal(st.Code - 128)
		}
	case ws.Signaled():
		st.Code = 128 + int(ws.Signal())
		st.Signal = ws.Signal()
	}
	s.mu.Lock()
	st.TimedOut = s.timedOut
	s.mu.Unlock()
	return st, nil
}

// Signal implements sandbox.Sandbox: init forwards it to the command.
func (s *running) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Kill implements sandbox.Sandbox. Killing pid 1 of the sandbox's pid namespace kills every process
// in it; the cgroup, when there is one, catches anything that got out of the namespace's reach.
func (s *running) Kill() error {
	err := s.cmd.Process.Kill()
	if s.cgroup != nil {
		s.cgroup.Kill()
	}
	return err
}

// Pid implements sandbox.Sandbox.
func (s *running) Pid() int { return s.cmd.Process.Pid }
