package scan

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchTree writes a project-like tree of n files: directories of 20 files three levels deep, mostly
// small source files, some of 64 KiB and a few of 1 MiB, with a sprinkling of findings.
func benchTree(b *testing.B, n int) string {
	b.Helper()
	root := b.TempDir()
	g := newGen(40)
	words := []string{"func", "return", "err", "nil", "if", "string", "package", "import", "struct", "var",
		"secret", "token", "password", "ghost", "xml", "array", "AST", "Parse", "-", "::", "://", "sk", "rk"}
	line := func() string {
		var s strings.Builder
		for range 8 {
			s.WriteString(words[g.r.IntN(len(words))] + " ")
		}
		return s.String() + "\n"
	}
	chunk := strings.Repeat(line()+line()+line()+line(), 16) // 4 KiB-ish of code-like text
	for i := range n {
		rel := fmt.Sprintf("d%d/e%d/f%d/file%d.go", i/2000, i/200%10, i/20%10, i)
		var content string
		switch {
		case i%1000 == 0:
			content = strings.Repeat(chunk, 256) // ~1 MiB
		case i%50 == 0:
			content = strings.Repeat(chunk, 16) // ~64 KiB
		case i%500 == 7:
			content = "key := \"" + g.github() + "\"\n" + chunk
		default:
			content = chunk[:g.r.IntN(len(chunk))]
		}
		abs := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(abs, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return root
}

// readAll is the baseline: a plain sequential walk that reads the same bytes ScanTree reads and
// judges nothing.
func readAll(root string) (files int, err error) {
	buf := make([]byte, DefaultMaxRead)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		files++
		_, err = io.ReadFull(f, buf)
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			err = nil
		}
		return err
	})
	return files, err
}

// cpuTime is the process's user and system CPU time so far: on a shared machine it says more about
// the scan's cost than the wall clock does.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkScanTree scans a 10,000-file tree (warm page cache) and reports ns/file, and the ratio to
// the baseline of reading the same bytes with a plain walk, measured in the same process.
func BenchmarkScanTree(b *testing.B) {
	const n = 10000
	root := benchTree(b, n)
	start, cpuStart := time.Now(), cpuTime(b)
	const baseRounds = 3
	for range baseRounds {
		if files, err := readAll(root); err != nil || files != n {
			b.Fatalf("baseline read %d files: %v", files, err)
		}
	}
	base := time.Since(start) / baseRounds
	baseCPU := (cpuTime(b) - cpuStart) / baseRounds

	// report checks the findings and reports the figures of one sub-benchmark.
	report := func(b *testing.B, found []Finding, want int, cpu0 time.Duration) {
		if len(found) != want {
			b.Fatalf("%d findings, want %d", len(found), want)
		}
		cpu := float64((cpuTime(b) - cpu0).Nanoseconds()) / float64(b.N)
		per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(per/n, "ns/file")
		b.ReportMetric(per/1e6, "ms/tree")
		b.ReportMetric(per/float64(base.Nanoseconds()), "x-plain-read")
		b.ReportMetric(cpu/n, "cpu-ns/file")
		b.ReportMetric(cpu/float64(baseCPU.Nanoseconds()), "x-plain-read-cpu")
	}
	for _, tc := range []struct {
		name string
		opt  Options
		want int
	}{
		{"content", Options{}, n / 500},
		{"content-1worker", Options{Workers: 1}, n / 500},
		{"config-only", Options{ConfigOnly: true}, 0}, // the tokens are in .go files
	} {
		b.Run(tc.name, func(b *testing.B) {
			var found []Finding
			cpu0 := cpuTime(b)
			for b.Loop() {
				var err error
				if found, err = ScanTree(context.Background(), root, tc.opt); err != nil {
					b.Fatal(err)
				}
			}
			report(b, found, tc.want, cpu0)
		})
	}
	// Cached: each round reads the cache a previous scan saved, scans, and saves it again, as a
	// cordon start would.
	b.Run("cached", func(b *testing.B) {
		c := NewCache()
		c.racy = -time.Hour // the tree was just written
		if _, err := ScanTree(context.Background(), root, Options{Cache: c}); err != nil {
			b.Fatal(err)
		}
		var saved bytes.Buffer
		if _, err := c.WriteTo(&saved); err != nil {
			b.Fatal(err)
		}
		var found []Finding
		cpu0 := cpuTime(b)
		for b.Loop() {
			c, err := ReadCache(bytes.NewReader(saved.Bytes()))
			if err != nil {
				b.Fatal(err)
			}
			if found, err = ScanTree(context.Background(), root, Options{Cache: c}); err != nil {
				b.Fatal(err)
			}
			if _, err := c.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		report(b, found, n/500, cpu0)
	})
}

// BenchmarkMatchContent measures the content rules alone over 64 KiB of code-like text, against
// bytes.Count over the same bytes (one SIMD pass: the floor for looking at every byte).
func BenchmarkMatchContent(b *testing.B) {
	g := newGen(41)
	var sb strings.Builder
	for sb.Len() < DefaultMaxRead {
		sb.WriteString("if err := parse(src, \"secret-token\"); err != nil { return fmt.Errorf(\"a://b: %w\", err) } // sk rk ax\n")
		sb.WriteString(g.str(40, alnum+" ") + "\n")
	}
	data := []byte(sb.String()[:DefaultMaxRead])
	c := classify("main.go")
	start := time.Now()
	const baseRounds = 1000
	for range baseRounds {
		bytes.Count(data, []byte{'\n'})
	}
	base := time.Since(start) / baseRounds
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if f := judge("main.go", c, data); len(f) != 0 {
			b.Fatal(f)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(base.Nanoseconds()), "x-bytes.Count")
}
