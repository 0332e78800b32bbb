package cordon

import (
	"os"

	"github.com/cordon-sandbox/cordon/internal/sandbox/linux"
	"github.com/cordon-sandbox/cordon/internal/sandbox/linux/cgroup"
	"github.com/cordon-sandbox/cordon/internal/services"
)

// Init must be called first thing in main (and in TestMain) by every program that starts runs. The
// native box re-executes the program's own binary as the sandbox's init and as its cgroup reaper,
// and a non-root run's fixture services as their overlay helper (a fresh process, with nothing of
// the caller's threads or memory); in those processes Init runs that role and exits, and in the
// program itself it returns at once.
func Init() {
	switch {
	case linux.IsInit():
		os.Exit(linux.InitMain())
	case len(os.Args) > 0 && os.Args[0] == linux.ReaperArg0:
		os.Exit(cgroup.ReaperMain())
	case len(os.Args) > 0 && os.Args[0] == services.MountArg0:
		os.Exit(services.MountMain()) // a non-root run's PostgreSQL: mount its data, exec the server
	}
}
