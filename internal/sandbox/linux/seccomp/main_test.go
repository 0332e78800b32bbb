//go:build linux && (amd64 || arm64)

package seccomp

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel tests re-execute the test binary as a child that installs the filter (or, for the
// comparison, does not) and then attacks it for real. These variables carry the child's instructions.
const (
	envMode     = "CORDON_SECCOMP_TEST_CHILD"    // filter, filter-nesting, nofilter or tsync-conflict
	envSiblings = "CORDON_SECCOMP_TEST_SIBLINGS" // pids of two processes the child did not start
	envDir      = "CORDON_SECCOMP_TEST_DIR"      // a scratch directory (mount target, test binaries)
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envMode); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// childEnv is what an attempt may use.
type childEnv struct {
	siblings []int
	dir      string
	// onOldThread runs f on a thread that existed before Install, to show TSYNC reached it.
	onOldThread func(f func() string) string
}

// childMain runs in the re-executed child: it prints a JSON object mapping each attempt's name to its
// result ("ok", an errno name, or how an executed program ended) and exits 0, or exits 2 if it could
// not set up.
func childMain(mode string) int {
	env := childEnv{dir: os.Getenv(envDir)}
	for _, s := range strings.Split(os.Getenv(envSiblings), ",") {
		if pid, err := strconv.Atoi(s); err == nil {
			env.siblings = append(env.siblings, pid)
		}
	}

	// A thread locked before Install: only TSYNC can put the filter on it.
	work, ready := make(chan func() string), make(chan string)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine's process
		ready <- ""
		for f := range work {
			ready <- f()
		}
	}()
	<-ready
	env.onOldThread = func(f func() string) string { work <- f; return <-ready }

	results := map[string]string{}
	var err error
	switch mode {
	case "filter":
		err = Install(Options{})
	case "filter-nesting":
		err = Install(Options{AllowNesting: true})
	case "nofilter":
		err = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	case "tsync-conflict":
		// The old thread gets a filter of its own, which TSYNC cannot reconcile: Install must fail
		// and leave every thread as it was.
		results["own filter on old thread"] = env.onOldThread(installAllowAll)
		results["install"] = result(Install(Options{}))
		results["keyctl"] = attemptKeyctl(env)
		return report(results)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", mode, err)
		return 2
	}
	for _, a := range attempts() {
		results[a.name] = a.run(env)
	}
	return report(results)
}

func report(results map[string]string) int {
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// installAllowAll puts a one-instruction allow-everything filter on the calling thread only.
func installAllowAll() string {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return result(err)
	}
	filter := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	prog := unix.SockFprog{Len: 1, Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	return errnoResult(0, errno)
}
