//go:build linux

package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/audit"
	"github.com/cordon-sandbox/cordon/internal/runstate"
)

// Issue 11, item 13: the audit log has a bound. An agent flooding refusals folds into a few events
// with counts; whatever the agent does, the log stops at its cap (a share of limits.disk) and says
// how much it suppressed; the run's state stays under limits.disk.

// dnsFlood is a python3 program that sends refused DNS queries as fast as one process can, waiting
// for each answer: random names under one domain (a DNS tunnel) for half the time, then one name
// over and over. It prints how many it sent and how many were answered.
const dnsFlood = `
import os, socket, struct, sys, time
def query(name, qid):
    labels = b"".join(bytes([len(l)]) + l.encode() for l in name.split("."))
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack(">HH", 16, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
s.connect(("127.0.0.1", 53))
sent = answered = 0
half = float(sys.argv[1]) / 2
for tunnel in (True, False):
    end = time.monotonic() + half
    while time.monotonic() < end:
        qid = sent & 0xffff
        name = os.urandom(12).hex() + ".t.evil.test" if tunnel else "same.evil.test"
        s.send(query(name, qid))
        sent += 1
        try:
            while struct.unpack(">H", s.recv(4096)[:2])[0] != qid:
                pass
            answered += 1
        except socket.timeout:
            pass
print("SENT", sent, "ANSWERED", answered)
`

// countingUpstream is an HTTP server on loopback that counts the requests it served.
func countingUpstream(t *testing.T) (port int, served *atomic.Int64) {
	t.Helper()
	served = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		fmt.Fprintln(w, "UPSTREAM")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port, served
}

var summaryRE = regexp.MustCompile(`(?s)cordon: network: (\d+) allowed, (\d+) denied.*?cordon (?:diff|log) (\d{8}-\d{6}-[0-9a-f]{8})`)

// runSummary is what cordon said on its stderr at the end of a run: the gateway's own count of its
// decisions, and the run's id.
func runSummary(t *testing.T, r result) (allowed, denied int, id string) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no network summary on stderr:\n%s", r)
	}
	allowed, _ = strconv.Atoi(m[1])
	denied, _ = strconv.Atoi(m[2])
	return allowed, denied, m[3]
}

// runDir is the run's state directory on the host.
func (h *harness) runDir(id string) string {
	return filepath.Join(h.home, ".local", "state", "cordon", "runs", id)
}

// TestAuditLogFoldsAFlood: refused DNS queries sent as fast as a process can for 3 s (once the way
// to 36 GB of log an hour) leave a small log, whose folded events add up exactly to the decisions the
// gateway counted; cordon log shows the counts. Control: allowed connections each keep their event.
func TestAuditLogFoldsAFlood(t *testing.T) {
	requireTool(t, "python3")
	requireTool(t, "curl")
	forEachTier(t, func(t *testing.T, h *harness) {
		port, served := countingUpstream(t)
		h.writeFile(filepath.Join(h.ws, "flood.py"), dnsFlood, 0o644)
		pol := fmt.Sprintf("network:\n  allow:\n    - {host: pkg.test, ports: [%d]}\n  hosts: {pkg.test: 127.0.0.1}\n", port)
		r := h.sandboxed(pol, fmt.Sprintf("python3 flood.py 3 && for i in 1 2 3; do curl -sS -m 10 http://pkg.test:%d/; done", port))
		var sent, answered int
		if _, err := fmt.Sscanf(r.stdout, "SENT %d ANSWERED %d", &sent, &answered); err != nil || r.code != 0 {
			t.Fatalf("the flood did not run: %v\n%s", err, r)
		}
		if answered < 500 || strings.Count(r.stdout, "UPSTREAM") != 3 || served.Load() != 3 {
			t.Fatalf("%d of %d queries answered, upstream served %d (want 3):\n%s", answered, sent, served.Load(), r)
		}
		_, denied, id := runSummary(t, r)
		path := filepath.Join(h.runDir(id), "audit.jsonl")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		events, err := audit.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		var refusals, refusalEvents, connects, tunnel, same int
		for _, e := range events {
			switch {
			case e.Kind == audit.KindDNS && e.Decision == audit.Deny:
				refusals += e.Decisions()
				refusalEvents++
				if e.Group == "evil.test" && e.Count > 1 && len(e.Names) > 1 {
					tunnel += e.Count
				}
				if e.Name == "same.evil.test" && e.Group == "" {
					same += e.Decisions()
				}
			case e.Kind == audit.KindConnect && e.Decision == audit.Allow && e.Name == "pkg.test":
				connects += e.Decisions()
			}
		}
		t.Logf("%s: %d queries sent, %d answered; the log holds %d bytes, %d refusal events for %d refusals", h.who.name, sent, answered, fi.Size(), refusalEvents, refusals)
		if fi.Size() > 1<<20 || refusalEvents > 100 {
			t.Errorf("a 3 s flood left %d bytes and %d refusal events in the log", fi.Size(), refusalEvents)
		}
		// Folding loses no decision: the counts add up to what the gateway counted.
		if refusals != denied || refusals < answered || refusals > sent {
			t.Errorf("the log's refusals add up to %d; the gateway denied %d; the script had %d answers of %d queries", refusals, denied, answered, sent)
		}
		if tunnel == 0 || same < 2 {
			t.Errorf("no folded tunnel event (%d) or repeated name (%d) in the log", tunnel, same)
		}
		if connects != 3 {
			t.Errorf("%d allowed connections to pkg.test in the log, want 3 (one each)", connects)
		}
		// cordon log shows the folded counts: the tunnel as *.evil.test with a sample of its names.
		shown := h.cordon(nil, "", "log", "--denied", id)
		if shown.code != 0 || !strings.Contains(shown.stdout, "COUNT") || !strings.Contains(shown.stdout, "*.evil.test") ||
			!strings.Contains(shown.stdout, "names=") || strings.Contains(shown.stdout, "pkg.test") {
			t.Errorf("cordon log --denied:\n%s", shown)
		}
	})
}

// TestAuditLogCapAndDiskLimit: connections the policy allows never fold, so a flood of them meets
// the log's cap, a share of limits.disk (4 MiB here: a 256 KiB log). Past it the log writes nothing
// more, the gateway keeps serving and counting, and the log ends with the number it suppressed;
// written and suppressed add up to every decision. The run's whole state directory (layers' image,
// log, records) stays within limits.disk.
func TestAuditLogCapAndDiskLimit(t *testing.T) {
	requireTool(t, "python3")
	forEachTier(t, func(t *testing.T, h *harness) {
		port, served := countingUpstream(t)
		const disk = 4 << 20
		budget, err := runstate.NewBudget(disk, audit.DefaultMaxBytes)
		if err != nil {
			t.Fatal(err)
		}
		// Each connection carries a long path, so each event is large; 2 500 of them are ~1.5 MB.
		flood := fmt.Sprintf(`
import socket
path = "/" + "p" * 190
ok = 0
for i in range(2500):
    s = socket.create_connection(("pkg.test", %d), 10)
    s.sendall(("GET %%s%%d HTTP/1.0\r\nHost: pkg.test\r\n\r\n" %% (path, i)).encode())
    if b"UPSTREAM" in s.makefile("rb").read():
        ok += 1
    s.close()
print("OK", ok)
`, port)
		h.writeFile(filepath.Join(h.ws, "flood.py"), flood, 0o644)
		pol := fmt.Sprintf("limits:\n  disk: 4MiB\nnetwork:\n  allow:\n    - {host: pkg.test, ports: [%d]}\n  hosts: {pkg.test: 127.0.0.1}\n", port)
		script := "python3 flood.py"
		if h.who.uid == 0 {
			// As root limits.disk holds for the layers too: fill them as well.
			script = "dd if=/dev/zero of=big bs=1M count=8 2>/dev/null; " + script
		}
		// Kept although rootless it changes nothing: its log is what is looked at.
		r := h.cordon(nil, "", "run", "--keep", "--policy", h.policy(pol), "--", "sh", "-c", script)
		var ok int
		if _, err := fmt.Sscanf(r.stdout, "OK %d", &ok); err != nil || ok != 2500 || served.Load() != 2500 {
			t.Fatalf("%d connections succeeded, upstream served %d, want 2500 (the gateway must keep serving past the cap): %v\n%s", ok, served.Load(), err, r)
		}
		allowed, denied, id := runSummary(t, r)
		if !strings.Contains(r.stderr, "the audit log reached its size limit") {
			t.Errorf("the run's summary does not say the log was capped:\n%s", r.stderr)
		}
		dir := h.runDir(id)
		path := filepath.Join(dir, "audit.jsonl")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > budget.AuditLog {
			t.Errorf("the log holds %d bytes, past its cap of %d", fi.Size(), budget.AuditLog)
		}
		events, err := audit.Read(path)
		if err != nil {
			t.Fatal(err)
		}
		last := events[len(events)-1]
		written := 0
		for _, e := range events {
			if e.Kind != audit.KindAudit {
				written += e.Decisions()
			}
		}
		if last.Kind != audit.KindAudit || !strings.Contains(last.Reason, "events suppressed") || last.Detail["connect"] == "" {
			t.Fatalf("the log does not end with the suppression record: %+v", last)
		}
		if written+last.Count != allowed+denied {
			t.Errorf("written %d + suppressed %d != the gateway's %d decisions", written, last.Count, allowed+denied)
		}
		shown := h.cordon(nil, "", "log", id)
		if !strings.Contains(shown.stdout, "events suppressed: the audit log reached its limit") {
			t.Errorf("cordon log does not show the suppression record:\n%s", shown.stdout)
		}
		run := &runstate.Run{Dir: dir, Meta: runstate.Meta{ID: id}}
		used, err := run.DiskUsage()
		t.Logf("%s: log %d bytes (cap %d), %d written + %d suppressed decisions; state directory %d bytes (limit %d)", h.who.name, fi.Size(), budget.AuditLog, written, last.Count, used, disk)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case h.who.uid != 0:
			t.Logf("rootless: limits.disk does not bound the layers (a loop device needs root); the log's cap holds")
		case used > disk:
			t.Errorf("the run's state takes %d bytes, past limits.disk of %d", used, disk)
		case used < budget.Layers:
			t.Errorf("the run's state takes %d bytes, less than its layers' image of %d: no image?", used, budget.Layers)
		}
	})
}
