//go:build !linux

package scan

import "golang.org/x/sys/unix"

// identityOf is what says a file has not changed since it was read.
func identityOf(st *unix.Stat_t) fileIdentity {
	return fileIdentity{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
