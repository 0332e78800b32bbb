package cordon_test

import (
	"context"
	"fmt"
	"os"

	"github.com/cordon-sandbox/cordon"
)

// An embedding program runs a command on a project inside the sandbox, waits for it, reviews what it
// changed (which the project does not have yet) and throws it away.
func Example() {
	project, err := os.MkdirTemp("", "project-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(project)
	state, err := os.MkdirTemp("", "cordon-state-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(state)

	// A program would load its policy with cordon.LoadPolicy("policy.yaml").
	ctx := context.Background()
	run, err := cordon.Start(ctx, cordon.Config{
		Policy:    cordon.DefaultPolicy(),
		Workspace: project,
		Command:   []string{"sh", "-c", "echo hi > f"},
		StateDir:  state,
	})
	if err != nil {
		fmt.Println("start:", err)
		return
	}
	defer run.Close()
	exit, err := run.Wait(ctx)
	if err != nil {
		fmt.Println("wait:", err)
		return
	}
	fmt.Printf("exit %d, %d path(s) changed\n", exit.Code, exit.Changed)

	finished, err := cordon.Store{Dir: state}.Open(run.ID())
	if err != nil {
		fmt.Println(err)
		return
	}
	changes, err := finished.Changes()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range changes {
		fmt.Println(c.Kind, c.Path)
	}
	if _, err := os.Stat(project + "/f"); os.IsNotExist(err) {
		fmt.Println("the project does not have f until the run is applied")
	}
	if err := finished.Discard(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(finished.Info().State)
	// Output:
	// exit 0, 1 path(s) changed
	// added f
	// the project does not have f until the run is applied
	// discarded
}
