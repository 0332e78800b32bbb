package policyimport

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// FuzzImport: whatever a settings file holds, a translation either fails with an error or is a
// policy cordon's parser loads (names, paths and values from the file are quoted, never spliced).
func FuzzImport(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for name, conv := range map[string]func(string, []byte) ([]byte, error){"srt": SRT, "claude-code": ClaudeCode} {
			out, err := conv("f.json", data)
			if err != nil {
				continue
			}
			if _, err := policy.Parse("out.yaml", out, policy.Options{Home: "/home/u"}); err != nil {
				t.Fatalf("%s: the translation does not load: %v\n%s", name, err, out)
			}
		}
	})
}
