// Package mountinfo reads the mount points of /proc/self/mountinfo, for the code that has to undo
// mounts it (or a killed run of it) made: a run's overlays, the test cluster's volumes. The mount
// point field is escaped by the kernel (a space is \040), so a comparison with a path must undo that
// first; this is the one place that does.
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Unescape undoes mountinfo's octal escapes (\040 for a space, \011 tab, \012 newline, \134
// backslash).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Under lists the mount points at or under dir (an absolute, clean path), deepest first; a path
// mounted twice is listed twice, the later mount (on top) first, so that unmounting in this order
// takes each mount off before what it covers.
func Under(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	return under(f, dir)
}

func under(f *os.File, dir string) ([]string, error) {
	var mounts []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := Unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") || dir == "/" {
			mounts = append(mounts, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	slices.Reverse(mounts)
	slices.SortStableFunc(mounts, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return mounts, nil
}
