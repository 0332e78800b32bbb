package scan

import "golang.org/x/sys/unix"

// identityOf is what says a file has not changed since it was read (the stat's form is Linux's here,
// stat_other.go has the BSDs').
func identityOf(st *unix.Stat_t) fileIdentity {
	return fileIdentity{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
