package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The streams in testdata were recorded from real `go test -json` runs of small packages that pass,
// fail, skip, do not build, panic and time out.
func TestSummariseRecordedStreams(t *testing.T) {
	for _, tc := range []struct {
		stream                  string
		passed, failed, skipped int
		failedAny               bool
		want, notWant           []string
	}{
		{stream: "pass", passed: 4, notWant: []string{"FAIL", "skipped:"}},
		{stream: "fail", passed: 2, failed: 3, failedAny: true,
			want:    []string{"--- FAIL example.com/rec/fail TestBad\n", "context line", `got "timeout", want "ok"`, "TestParent/rootless", "boom"},
			notWant: []string{"TestGood\n"}},
		{stream: "skip", passed: 2, skipped: 2,
			want: []string{"skipped:\n", "example.com/rec/skip TestIdentities/rootless: s_test.go:7: not running as root: the root variants need root\n",
				"example.com/rec/skip TestTool: s_test.go:9: strace not installed\n"}},
		{stream: "build", failedAny: true,
			want: []string{"--- FAIL example.com/rec/build\n", "as int value in return statement\nFAIL\texample.com/rec/build [build failed]\n", "1 package(s) failed\n"}},
		{stream: "panic", passed: 1, failed: 1, failedAny: true,
			want: []string{"--- FAIL example.com/rec/panic TestPanics\n", "assignment to entry in nil map"}},
		{stream: "timeout", passed: 1, failed: 1, failedAny: true,
			want: []string{"--- FAIL example.com/rec/timeout TestHangs (did not finish)\n", "waiting", "panic: test timed out after 2s"}},
	} {
		t.Run(tc.stream, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.stream+".json"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out bytes.Buffer
			s, err := summarise(f, &out)
			if err != nil {
				t.Fatal(err)
			}
			s.write(&out)
			got := out.String()
			closing := lastLine(got)
			wantClosing := strings.Join([]string{itoa(tc.passed) + " passed", itoa(tc.failed) + " failed", itoa(tc.skipped) + " skipped"}, ", ")
			if closing != wantClosing {
				t.Errorf("closing line %q, want %q\n%s", closing, wantClosing, got)
			}
			if s.failedAny() != tc.failedAny {
				t.Errorf("failedAny = %v, want %v", s.failedAny(), tc.failedAny)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, got)
				}
			}
		})
	}
}

// Lines that are not events (a toolchain's or vet's words) are shown, not dropped.
func TestSummarisePassesOnNonJSONLines(t *testing.T) {
	var out bytes.Buffer
	if _, err := summarise(strings.NewReader("go: downloading example.com/x v1.0.0\n"), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "go: downloading example.com/x v1.0.0\n" {
		t.Errorf("got %q", out.String())
	}
}

// go test failing outside its stream (here: a flag value it cannot parse) fails the run with go test's
// words shown, though the stream holds no failing test; a package that cannot be set up fails it too.
func TestRunFailsWhenGoTestFails(t *testing.T) {
	for _, tc := range []struct {
		args             []string
		inStdout, inErrs string
	}{
		{[]string{"--", "-timeout", "bogus", "./testdata/"}, "go test failed", `invalid value "bogus"`},
		{[]string{"--", "./no-such-package/"}, "no-such-package: directory not found", ""},
	} {
		var out, errw bytes.Buffer
		if code := run(tc.args, &out, &errw); code == 0 {
			t.Errorf("%v: exit 0 for a failed go test\nstdout: %s\nstderr: %s", tc.args, out.String(), errw.String())
		}
		if !strings.Contains(out.String(), tc.inStdout) || !strings.Contains(errw.String(), tc.inErrs) {
			t.Errorf("%v: want %q in stdout and %q in stderr\nstdout: %s\nstderr: %s", tc.args, tc.inStdout, tc.inErrs, out.String(), errw.String())
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func itoa(n int) string { return strconv.Itoa(n) }
