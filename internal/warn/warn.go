// Package warn is the one convention by which cordon's packages hand a warning up to whoever runs
// them: something the user should know that does not stop the run (a layer this host cannot
// provide, a mount shown with its host owners). Packages never print; the caller (package cordon)
// turns each warning into a value for its own caller. Refusals for the user's terminal are not
// warnings: they go through the gateway's notifier.
package warn

import (
	"fmt"
	"strings"
)

// Func receives one warning: a single line, without a "cordon:" prefix or a trailing newline. It
// may be called from any goroutine and must not block. A nil Func drops warnings.
type Func func(line string)

// Printf formats one warning and hands it to f; on a nil f it does nothing, so a package need not
// check whether its caller wants warnings.
func (f Func) Printf(format string, args ...any) {
	if f != nil {
		f(fmt.Sprintf(format, args...))
	}
}

// Printable makes text that came from outside cordon (a server's answer, a file a sandbox wrote) fit
// for one line of a warning or an error: at most max bytes (then "…"), and every control character
// (C0, DEL, C1: what could end the line, move the cursor or forge a terminal's output) replaced by ?,
// and so is every bidirectional control (U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which
// reorders how the rest of the line reads without being seen.
func Printable(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= max {
			b.WriteString("…")
			break
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || bidiControl(r) {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// bidiControl reports the Unicode bidirectional formatting characters.
func bidiControl(r rune) bool {
	return r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}
