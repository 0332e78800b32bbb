package kubepod

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// bundle is WriteBundle's output for the given parts (nil: absent).
func bundle(t testing.TB, st *Status, patch, audit []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	var pr, ar *bytes.Reader
	if patch != nil {
		pr = bytes.NewReader(patch)
	}
	if audit != nil {
		ar = bytes.NewReader(audit)
	}
	var err error
	switch {
	case pr != nil && ar != nil:
		err = WriteBundle(&b, st, pr, ar)
	case pr != nil:
		err = WriteBundle(&b, st, pr, nil)
	case ar != nil:
		err = WriteBundle(&b, st, nil, ar)
	default:
		err = WriteBundle(&b, st, nil, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestBundleRoundTrip: a bundle reads back as written, whatever the parts' sizes (none, empty, one
// byte short of a chunk, several chunks), with the status in the header and the sizes in the end.
func TestBundleRoundTrip(t *testing.T) {
	st := &Status{Version: Version, Base: strings.Repeat("b", 40)}
	for _, tc := range []struct {
		name         string
		st           *Status
		patch, audit []byte
	}{
		{"nothing", nil, nil, nil},
		{"empty patch", st, []byte{}, nil},
		{"patch", st, bytes.Repeat([]byte{0, 1, 0xff, '\n', '"'}, ChunkBytes/5), []byte("a\n")},
		{"several chunks", st, bytes.Repeat([]byte("x"), 2*ChunkBytes+1), bytes.Repeat([]byte("y"), ChunkBytes)},
		{"audit only", nil, nil, []byte("{}\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var patch, audit bytes.Buffer
			hdr, end, err := ReadBundle(bytes.NewReader(bundle(t, tc.st, tc.patch, tc.audit)), &patch, &audit)
			if err != nil {
				t.Fatal(err)
			}
			if (hdr.Status == nil) != (tc.st == nil) || (tc.st != nil && *hdr.Status != *tc.st) {
				t.Errorf("status %+v, want %+v", hdr.Status, tc.st)
			}
			if end.HasPatch != (tc.patch != nil) || end.PatchBytes != int64(len(tc.patch)) || end.AuditBytes != int64(len(tc.audit)) {
				t.Errorf("end %+v", end)
			}
			if !bytes.Equal(patch.Bytes(), tc.patch) || !bytes.Equal(audit.Bytes(), tc.audit) {
				t.Errorf("patch %d bytes, audit %d bytes: not as written", patch.Len(), audit.Len())
			}
		})
	}
}

// TestBundleCut: a bundle cut at any byte before its end record's last is an error, never a
// shorter result (only the newline after it may go).
func TestBundleCut(t *testing.T) {
	full := bundle(t, &Status{Version: Version}, bytes.Repeat([]byte("p"), ChunkBytes+10), []byte("audit line\n"))
	for n := 0; n < len(full)-1; n++ {
		// Every byte of the small records; the big chunk's every few hundredth.
		if n > 200 && n < len(full)-400 && n%997 != 0 {
			continue
		}
		if _, _, err := ReadBundle(bytes.NewReader(full[:n]), &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Fatalf("a bundle cut at %d of %d bytes was read", n, len(full))
		}
	}
	if _, _, err := ReadBundle(bytes.NewReader(full), &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatalf("the whole bundle: %v", err)
	}
}

// TestBundleRefused: streams that are out of order, of another version, over a limit, inconsistent
// or of one line too long are refused, and a writer's error is passed on.
func TestBundleRefused(t *testing.T) {
	hdr := `{"header":{"version":1}}` + "\n"
	for _, tc := range []struct {
		name, stream string
		lim          Limits
		want         string
	}{
		{"no header", `{"part":"patch","data":"eA=="}` + "\n", Limits{10, 10}, "does not start with a header"},
		{"two headers", hdr + hdr, Limits{10, 10}, "two headers"},
		{"version", `{"header":{"version":2}}` + "\n", Limits{10, 10}, "version 2"},
		{"unknown part", hdr + `{"part":"secrets","data":"eA=="}` + "\n", Limits{10, 10}, "unknown part"},
		{"patch over", string(bundle(t, nil, []byte("12345678901"), nil)), Limits{10, 100}, "changes are over 10 bytes"},
		{"audit over", string(bundle(t, nil, nil, []byte("12345678901"))), Limits{100, 10}, "audit log is over 10 bytes"},
		{"sizes disagree", hdr + `{"part":"patch","data":"eA=="}` + "\n" + `{"end":{"patchBytes":2,"hasPatch":true}}` + "\n", Limits{10, 10}, "cut short"},
		{"patch bytes without a patch", hdr + `{"part":"patch","data":"eA=="}` + "\n" + `{"end":{"patchBytes":1}}` + "\n", Limits{10, 10}, "says it has no patch"},
		{"a line too long", hdr + `{"part":"audit","data":"` + strings.Repeat("A", MaxRecordBytes) + `"}` + "\n", Limits{MaxRecordBytes, MaxRecordBytes}, "over"},
		{"not JSON", hdr + "patch\n", Limits{10, 10}, "reading the pod's bundle"},
		{"empty", "", Limits{10, 10}, "ended before its end record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadBundleWith(strings.NewReader(tc.stream), &bytes.Buffer{}, &bytes.Buffer{}, tc.lim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadBundleWith: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	t.Run("limits at their size", func(t *testing.T) {
		if _, _, err := ReadBundleWith(bytes.NewReader(bundle(t, nil, []byte("1234567890"), []byte("x"))), &bytes.Buffer{}, &bytes.Buffer{}, Limits{10, 1}); err != nil {
			t.Errorf("parts at the limits: %v", err)
		}
	})
	t.Run("writer error", func(t *testing.T) {
		_, _, err := ReadBundle(bytes.NewReader(bundle(t, nil, []byte("p"), nil)), failWriter{}, &bytes.Buffer{})
		if !errors.Is(err, errFail) {
			t.Errorf("ReadBundle: %v, want the writer's error", err)
		}
	})
}

var errFail = errors.New("disk full")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errFail }

// FuzzReadBundle: ReadBundleWith never panics, and what it accepts is consistent: the parts it wrote
// are the sizes its end names, no patch bytes came without a patch, the limits hold, and written
// again and read back they are the same.
func FuzzReadBundle(f *testing.F) {
	f.Add(bundle(f, &Status{Version: Version, Base: "abc"}, []byte("diff --git a/x b/x\n"), []byte("{}\n")))
	f.Add(bundle(f, nil, nil, nil))
	f.Add([]byte(`{"header":{"version":1}}` + "\n" + `{"end":{"patchBytes":0,"auditBytes":0}}`))
	lim := Limits{PatchBytes: 1 << 16, AuditBytes: 1 << 16}
	f.Fuzz(func(t *testing.T, stream []byte) {
		var patch, audit bytes.Buffer
		hdr, end, err := ReadBundleWith(bytes.NewReader(stream), &patch, &audit, lim)
		if err != nil {
			return
		}
		if hdr == nil || end == nil || hdr.Version != Version {
			t.Fatalf("accepted without a header or end: %+v %+v", hdr, end)
		}
		if end.PatchBytes != int64(patch.Len()) || end.AuditBytes != int64(audit.Len()) {
			t.Fatalf("end %+v, but %d and %d bytes written", end, patch.Len(), audit.Len())
		}
		if !end.HasPatch && patch.Len() > 0 || int64(patch.Len()) > lim.PatchBytes || int64(audit.Len()) > lim.AuditBytes {
			t.Fatalf("end %+v with %d patch and %d audit bytes", end, patch.Len(), audit.Len())
		}
		var p []byte
		if end.HasPatch {
			p = append([]byte{}, patch.Bytes()...)
		}
		var p2, a2 bytes.Buffer
		_, end2, err := ReadBundleWith(bytes.NewReader(bundle(t, hdr.Status, p, audit.Bytes())), &p2, &a2, lim)
		if err != nil || end2.HasPatch != end.HasPatch || !bytes.Equal(p2.Bytes(), patch.Bytes()) || !bytes.Equal(a2.Bytes(), audit.Bytes()) {
			t.Fatalf("written again and read back: %v, %+v", err, end2)
		}
	})
}
