//go:build !linux

package services

import (
	"errors"
	"syscall"
)

// sysProcAttr refuses: the isolation servers get (their own user and network namespaces) is Linux's.
func sysProcAttr(IDs, bool) (*syscall.SysProcAttr, error) {
	return nil, errors.New("fixture services need Linux (user and network namespaces)")
}

func mountOverlay(lower, upper, work, target string) error {
	return errors.New("overlay mounts need Linux")
}

func unmountBelow(string) {}
