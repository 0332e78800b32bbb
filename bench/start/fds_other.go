//go:build !linux

package main

// cloexecInherited does nothing where cordon's sandbox does not run.
func cloexecInherited() error { return nil }
