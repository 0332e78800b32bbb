package policy

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, that every failure is a *Error naming the file
// (positioned, except for YAML syntax errors the YAML library reports without a line), and that
// whatever parses renders to YAML that parses back to the same policy.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("testdata/example.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("f.yaml", data, testOpts)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is %T, want *Error", err, err)
			}
			if pe.File != "f.yaml" || pe.Msg == "" || pe.Line < 0 || pe.Column < 0 {
				t.Fatalf("malformed error %#v", pe)
			}
			if pe.Line == 0 && !strings.HasPrefix(pe.Msg, "invalid YAML: ") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		out, err := p.Render()
		if err != nil {
			t.Fatalf("Render: %v", err)
		}
		back, err := Parse("f.yaml", out, Options{})
		if err != nil {
			t.Fatalf("rendered policy does not parse: %v\n%s", err, out)
		}
		back.SourceSHA256 = p.SourceSHA256 // of other bytes: the rendering
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("round trip changed the policy\n got %+v\nwant %+v", back, p)
		}
	})
}
