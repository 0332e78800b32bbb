package budget

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func daySpec(max int64) Spec {
	return Spec{Host: "api.example", Per: PerDay, MaxRequests: max, Prices: Prices{Input: 1, Output: 2}}
}

// TestDayAcrossRuns: a day budget holds across runs of the same policy file, not of another one,
// and starts afresh the next UTC day.
func TestDayAcrossRuns(t *testing.T) {
	dir := t.TempDir()
	clock := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	open := func(policy string) *Budget {
		d, err := OpenDayStore(dir, policy)
		if err != nil {
			t.Fatal(err)
		}
		d.now = func() time.Time { return clock }
		l, err := NewLedger([]Spec{daySpec(3)}, d, "R")
		if err != nil {
			t.Fatal(err)
		}
		return l.For("api.example")
	}
	pol := filepath.Join(dir, "cordon.yaml")
	for run := 0; run < 2; run++ {
		b := open(pol)
		for i := 0; i < 2; i++ {
			err := b.Admit()
			if run == 1 && i == 1 {
				var se *SpentError
				if !errors.As(err, &se) || se.Day != "2026-12-01" || se.Spent != 3 {
					t.Fatalf("second run, second request: %v, want refused (day spent)", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("run %d request %d: %v", run, i, err)
			}
			if err := b.Record(Usage{Input: 10, Output: 1, Known: true}); err != nil {
				t.Fatal(err)
			}
		}
		if run == 1 {
			if got := b.Totals(); got.Requests != 1 {
				t.Fatalf("second run's own totals: %+v, want 1 request", got)
			}
		}
	}
	d, _ := OpenDayStore(dir, pol)
	d.now = func() time.Time { return clock }
	today, err := d.Today()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Totals{Requests: 3, Input: 30, Output: 3, CostUSD: 3 * 12 / 1e6}); today["api.example"] != want {
		t.Fatalf("Today %+v, want %+v", today, want)
	}
	if err := open(filepath.Join(dir, "other.yaml")).Admit(); err != nil {
		t.Fatalf("another policy file: %v", err)
	}
	clock = clock.Add(2 * time.Hour)
	if err := open(pol).Admit(); err != nil {
		t.Fatalf("next day: %v", err)
	}
}

// TestDayConcurrentRuns: runs of the same policy file recording at once lose no update.
func TestDayConcurrentRuns(t *testing.T) {
	dir := t.TempDir()
	const runs, each = 4, 25
	var wg sync.WaitGroup
	for r := 0; r < runs; r++ {
		d, err := OpenDayStore(dir, "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLedger([]Spec{daySpec(0)}, d, strconv.Itoa(r))
		if err != nil {
			t.Fatal(err)
		}
		b := l.For("api.example")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := b.Record(Usage{Output: 1, Known: true}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	d, _ := OpenDayStore(dir, "p.yaml")
	today, err := d.Today()
	if err != nil {
		t.Fatal(err)
	}
	if got := today["api.example"]; got.Requests != runs*each || got.Output != runs*each {
		t.Fatalf("day totals %+v, want %d requests and output tokens", got, runs*each)
	}
}

// TestDaySurvivesKill: a cordon killed with SIGKILL right after Record keeps the answer counted.
// The test binary re-runs itself as the child that records, signals, and waits to be killed.
func TestDaySurvivesKill(t *testing.T) {
	if dir := os.Getenv("BUDGET_KILL_CHILD_DIR"); dir != "" {
		d, err := OpenDayStore(dir, "p.yaml")
		if err != nil {
			fmt.Println("child:", err)
			os.Exit(2)
		}
		l, _ := NewLedger([]Spec{daySpec(0)}, d, "child")
		if err := l.For("api.example").Record(Usage{Input: 5, Output: 7, Known: true}); err != nil {
			fmt.Println("child:", err)
			os.Exit(2)
		}
		fmt.Println("recorded")
		time.Sleep(time.Minute)
		os.Exit(3)
	}
	dir := t.TempDir()
	for i := 1; i <= 2; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDaySurvivesKill$")
		cmd.Env = append(os.Environ(), "BUDGET_KILL_CHILD_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, _ := out.Read(buf)
		if !strings.Contains(string(buf[:n]), "recorded") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child said %q", buf[:n])
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		d, err := OpenDayStore(dir, "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		today, err := d.Today()
		if err != nil {
			t.Fatal(err)
		}
		if got := today["api.example"]; got.Requests != int64(i) || got.Input != 5*int64(i) || got.Output != 7*int64(i) {
			t.Fatalf("after kill %d: %+v", i, got)
		}
	}
}

// TestDayStoreCorrupt: an unreadable day file refuses rather than starting the day from zero.
func TestDayStoreCorrupt(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDayStore(dir, "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.path(d.date()), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, _ := NewLedger([]Spec{daySpec(10)}, d, "R")
	if err := l.For("api.example").Admit(); err == nil {
		t.Fatal("Admit with a corrupt day file: nil")
	}
}

// TestDayUnsavedRefuses: when the day's totals cannot be written (here the lock file is a
// directory), the answer is not lost from view: the budget refuses from then on instead of reading
// a day file that no longer holds what was spent.
func TestDayUnsavedRefuses(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDayStore(dir, "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := NewLedger([]Spec{daySpec(10)}, d, "R")
	b := l.For("api.example")
	if err := b.Admit(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, d.key+".lock"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := b.Record(Usage{Input: 1, Known: true}); err == nil {
		t.Fatal("Record with an unwritable day store: nil")
	}
	if err := b.Admit(); err == nil {
		t.Fatal("Admit after a day total could not be saved: nil (the spend would go uncounted)")
	}
}
