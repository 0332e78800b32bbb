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

func helperAttr(*syscall.SysProcAttr) {}

// MountArg0 and MountMain exist on Linux only; see nsoverlay_linux.go.
const MountArg0 = "cordon-service-mount"

// MountMain is the Linux overlay helper; elsewhere it has nothing to do.
func MountMain() int { return 2 }

const (
	mountRefused       = 87
	mountRefusedPrefix = "cordon-service-mount: "
)
