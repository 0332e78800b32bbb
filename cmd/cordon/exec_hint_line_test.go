package main

import (
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon"
)

// TestExecHintNamesThePathOnce: the line for a command outside the sandbox's PATH spells the PATH
// out once in the error and once in the fix (-e PATH=DIR:PATH), not again for the policy field:
// a distribution's PATH is long, and the line should stay readable.
func TestExecHintNamesThePathOnce(t *testing.T) {
	const sandboxPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, tc := range []struct {
		name string
		e    cordon.ExecError
	}{
		{"inside, outside the PATH", cordon.ExecError{Path: "tool", NotFound: true, SearchPath: sandboxPath, Host: "/work/p/bin/tool"}},
		{"hidden", cordon.ExecError{Path: "tool", NotFound: true, SearchPath: sandboxPath, Host: "/home/u/go/bin/tool", Hidden: []string{"/home/u/go/bin"}}},
		{"interpreter", cordon.ExecError{Path: "./x.sh", Interpreter: "tool", NotFound: true, SearchPath: sandboxPath, Host: "/work/p/bin/tool"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := tc.e.Error() + execHint(&tc.e)
			dir := tc.e.Host[:strings.LastIndexByte(tc.e.Host, '/')]
			if !strings.Contains(line, "-e PATH="+dir+":"+sandboxPath+" ") || !strings.Contains(line, "env.set: {PATH: ") {
				t.Errorf("no PATH fix for this run and the policy in %q", line)
			}
			if n := strings.Count(line, sandboxPath); n != 2 {
				t.Errorf("the sandbox's PATH spelled out %d times, want 2 (the error, the fix): %q", n, line)
			}
		})
	}
}
