//go:build linux

package kubetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
)

// spawner starts the cluster's processes from one OS thread that stays locked until Stop, so that
// each can be told to die with the test process (PR_SET_PDEATHSIG fires when the thread that forked
// a child exits, and the Go runtime may end any other thread). A test binary killed by its timeout
// then leaves no control plane behind; what else it leaves, the next Start removes.
type spawner struct {
	req  chan spawnReq
	quit chan struct{}
	done chan struct{}
}

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func newSpawner() *spawner {
	s := &spawner{req: make(chan spawnReq), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, at stop
		defer close(s.done)
		for {
			select {
			case r := <-s.req:
				r.res <- r.cmd.Start()
			case <-s.quit:
				return
			}
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	r := spawnReq{cmd: cmd, res: make(chan error, 1)}
	select {
	case s.req <- r:
		return <-r.res
	case <-s.done:
		return fmt.Errorf("kubetest: the cluster is stopping")
	}
}

// stop ends the spawner's thread, which kills whatever it started that is still alive.
func (s *spawner) stop() {
	close(s.quit)
	<-s.done
}

// proc is one of the cluster's processes, its output in its own log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once it has exited and been waited for
	err  error         // its exit, once done is closed
}

// startProc starts bin with args, its output going to logDir/name.log, with env added to a
// minimal environment.
func startProc(s *spawner, logDir, name, bin string, args []string, env ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %s's log: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"}, env...)
	if err := s.start(cmd); err != nil {
		return nil, fmt.Errorf("kubetest: starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited says whether p has exited, and how.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("kubetest: %s exited (%v); its log ends:\n%s", p.name, p.err, tail(p.log, 40))
	default:
		return nil
	}
}

// tail is the last n lines of a file, for an error message.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
