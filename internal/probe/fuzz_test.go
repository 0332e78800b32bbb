//go:build linux

package probe

import "testing"

// FuzzReadJSON: the report comes from inside a sandbox, so verify's parser must never panic and must
// never accept a verdict other than PASS, FAIL or SKIP.
func FuzzReadJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := ReadJSON(b)
		if err != nil {
			return
		}
		if len(sc.Results) == 0 {
			t.Fatal("accepted a report with no results")
		}
		for _, r := range sc.Results {
			if r.Status != Pass && r.Status != Fail && r.Status != Skip {
				t.Fatalf("accepted verdict %q", r.Status)
			}
		}
	})
}
