package policy

import (
	"strings"
	"testing"
)

// TestSandboxWorkdir: sandbox.workdir is a path inside the workspace, cleaned, and survives Render.
func TestSandboxWorkdir(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "src", want: "src"},
		{in: "src/pkg/", want: "src/pkg"},
		{in: "./a/../b", want: "b"},
		{in: ".", want: "."},
		{in: "/etc", err: "is absolute"},
		{in: "../x", err: "leaves the workspace"},
		{in: "a/../../x", err: "leaves the workspace"},
		{in: "", err: "must not be empty"},
	} {
		p, err := Parse("p.yaml", []byte("version: 1\nsandbox:\n  workdir: \""+tc.in+"\"\n"), Options{})
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), "sandbox.workdir") || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("workdir %q: got error %v, want one with %q", tc.in, err, tc.err)
			}
		case err != nil:
			t.Errorf("workdir %q: %v", tc.in, err)
		case p.Sandbox.Workdir != tc.want:
			t.Errorf("workdir %q: got %q, want %q", tc.in, p.Sandbox.Workdir, tc.want)
		default:
			out, err := p.Render()
			if err != nil {
				t.Fatal(err)
			}
			again, err := Parse("r.yaml", []byte(out), Options{})
			if err != nil || again.Sandbox.Workdir != tc.want {
				t.Errorf("workdir %q: rendered and read again: %v, %+v", tc.in, err, again)
			}
		}
	}
}
