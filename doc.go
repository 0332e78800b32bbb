// Package cordon runs a command (a coding agent) inside cordon's three boundaries, as a Go library:
// the file system through a disposable copy-on-write workspace, network egress through cordon's
// gateway and nothing else, and credentials as placeholders that only the gateway swaps for their
// values. It is what the cordon command is built on, for programs that embed the sandbox (an agent
// platform, a CI runner) rather than shell out to it.
//
// A run has two halves, in the manner of runc's libcontainer and gVisor's runsc/container. Start
// assembles everything the policy asks for and returns a *Run once the command runs inside the
// finished boundary; Wait reports how it ended and leaves nothing behind (no process, no goroutine,
// no minted token). What the command changed stays in the run's own directory until the caller
// decides: OpenRun returns a finished run to Diff, Apply, Export or Discard.
//
// The library prints nothing. What the user should know (a limit that degraded, a secret-shaped file
// that was masked, a host the gateway refused) is returned as Warning values, through
// Config.OnWarning as it happens and Run.Warnings afterwards; the audit log is read back as typed
// Events.
//
// The library installs no signal handler: a program that wants Ctrl-C to end the run cancels the
// context given to Start (before the command runs, which revokes what was prepared) and forwards
// signals with Run.Signal once it does.
package cordon
