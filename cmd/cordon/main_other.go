//go:build !linux

package main

// closeInheritedOnExec does nothing on a platform without a sandbox backend: nothing is started
// there for a descriptor to travel into.
func closeInheritedOnExec() error { return nil }
