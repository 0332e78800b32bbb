package policy

import (
	"bytes"
	"os"
	"testing"
)

// TestReadmePolicyParses keeps the README's policy reference true: every ```yaml block of README.md
// that is a policy (it starts with "version: 1") parses, so a key renamed or a value format changed in
// the code cannot leave the reference behind.
func TestReadmePolicyParses(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for rest := data; ; {
		_, after, ok := bytes.Cut(rest, []byte("```yaml\n"))
		if !ok {
			break
		}
		block, next, ok := bytes.Cut(after, []byte("\n```"))
		if !ok {
			t.Fatal("README.md: a ```yaml block is not closed")
		}
		rest = next
		if !bytes.HasPrefix(block, []byte("version: 1\n")) {
			continue
		}
		found++
		if _, err := Parse("README.md policy block", append(block, '\n'), Options{Home: "/home/u", Workspace: "/home/u/project"}); err != nil {
			t.Errorf("README.md's policy reference does not parse: %v", err)
		}
	}
	if found == 0 {
		t.Fatal("README.md has no policy block (a ```yaml block starting with \"version: 1\")")
	}
}
