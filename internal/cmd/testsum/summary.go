package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), including the build events go test emits
// for a package that does not compile.
type event struct {
	Action      string
	Package     string
	ImportPath  string // build-output, build-fail
	Test        string
	Output      string
	FailedBuild string
}

// key names one test, or a package's own output when Test is "".
type key struct{ pkg, test string }

// summary is what a stream added up to.
type summary struct {
	passed, failed, skipped int
	skips                   []skip
	failedPackages          int
	// output holds each running test's and package's lines until it ends.
	output map[key]*bytes.Buffer
	// running holds the tests started and not ended: at a package's end they failed with it (a
	// timeout or a panic ends the binary without a verdict for the test that was running).
	running map[key]bool
	// builds holds compiler output by import path, shown when the package's build failed.
	builds map[string]*bytes.Buffer
}

type skip struct{ name, reason string }

// summarise reads a go test -json stream, writing failures to w as they end.
func summarise(r io.Reader, w io.Writer) (*summary, error) {
	s := &summary{output: map[key]*bytes.Buffer{}, running: map[key]bool{}, builds: map[string]*bytes.Buffer{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (go vet's or a toolchain download's words): pass it on.
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		s.add(e, w)
	}
	return s, sc.Err()
}

func (s *summary) buf(k key) *bytes.Buffer {
	b := s.output[k]
	if b == nil {
		b = &bytes.Buffer{}
		s.output[k] = b
	}
	return b
}

func (s *summary) add(e event, w io.Writer) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		b := s.builds[e.ImportPath]
		if b == nil {
			b = &bytes.Buffer{}
			s.builds[e.ImportPath] = b
		}
		b.WriteString(e.Output)
	case "run":
		s.running[k] = true
	case "output":
		s.buf(k).WriteString(e.Output)
	case "pass", "fail", "skip":
		if e.Test == "" {
			s.endPackage(e, w)
			return
		}
		delete(s.running, k)
		out := s.output[k]
		delete(s.output, k)
		switch e.Action {
		case "pass":
			s.passed++
		case "fail":
			s.failed++
			fmt.Fprintf(w, "--- FAIL %s %s\n%s\n", e.Package, e.Test, text(out))
		case "skip":
			s.skipped++
			s.skips = append(s.skips, skip{e.Package + " " + e.Test, skipReason(out)})
		}
	}
}

// endPackage closes a package: on failure it shows the tests left running, the package's own
// output and, for a build failure, the compiler's.
func (s *summary) endPackage(e event, w io.Writer) {
	var open []string
	for k := range s.running {
		if k.pkg == e.Package {
			open = append(open, k.test)
		}
	}
	sort.Strings(open)
	pkgOut := s.output[key{e.Package, ""}]
	delete(s.output, key{e.Package, ""})
	if e.Action != "fail" {
		return
	}
	s.failedPackages++
	for _, t := range open {
		k := key{e.Package, t}
		s.failed++
		fmt.Fprintf(w, "--- FAIL %s %s (did not finish)\n%s\n", e.Package, t, text(s.output[k]))
		delete(s.running, k)
		delete(s.output, k)
	}
	fmt.Fprintf(w, "--- FAIL %s\n", e.Package)
	if b := s.builds[e.FailedBuild]; e.FailedBuild != "" && b != nil {
		fmt.Fprintf(w, "%s\n", text(b))
	}
	fmt.Fprintf(w, "%s\n", text(pkgOut))
}

// skipReason is what a skipped test said: its output without the framing lines.
func skipReason(b *bytes.Buffer) string {
	var lines []string
	for _, l := range strings.Split(text(b), "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		lines = append(lines, t)
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	return strings.Join(lines, "; ")
}

func text(b *bytes.Buffer) string {
	if b == nil {
		return ""
	}
	return strings.TrimRight(b.String(), "\n")
}

func (s *summary) failedAny() bool { return s.failed > 0 || s.failedPackages > 0 }

// write prints the skipped tests and the closing line (CI reads the last line).
func (s *summary) write(w io.Writer) {
	if len(s.skips) > 0 {
		fmt.Fprintf(w, "skipped:\n")
		for _, sk := range s.skips {
			fmt.Fprintf(w, "  %s: %s\n", sk.name, sk.reason)
		}
	}
	if s.failedPackages > 0 {
		fmt.Fprintf(w, "%d package(s) failed\n", s.failedPackages)
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
}
