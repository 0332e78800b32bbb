package console

import "golang.org/x/sys/unix"

// onPipeFS reports whether fd (a FIFO) is an anonymous pipe, on pipefs, rather than a named FIFO.
func onPipeFS(fd int) (bool, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return false, err
	}
	return fs.Type == unix.PIPEFS_MAGIC, nil
}
