package gitpush

import (
	"bytes"
	"fmt"
	"strings"
)

// ResultType is the Content-Type of a receive-pack answer over smart HTTP.
const ResultType = "application/x-git-receive-pack-result"

// Reports reports whether the client asked for a report of each ref's fate (report-status or
// report-status-v2), which Refusal answers with; without one, git reads no reasons from the answer and
// the push is better refused with an HTTP error.
func (r *Request) Reports() bool {
	return r.Has("report-status") || r.Has("report-status-v2")
}

// Refusal is the body of a receive-pack answer that rejects every command of req, as receive-pack
// reports refs a hook declined: "unpack ok", then "ng REF REASON" for each, so that git prints each
// ref as "[remote rejected] (REASON)". reasons gives a ref's reason; a ref it lacks gets whole (the
// push is refused as one). With side-band-64k the report goes on band 1 and message, line by line, on
// band 2, which git prints as "remote: ...".
func Refusal(req *Request, reasons map[string]string, whole, message string) []byte {
	var report bytes.Buffer
	writePkt(&report, "unpack ok\n")
	for _, c := range req.Commands {
		reason := reasons[c.Ref]
		if reason == "" {
			reason = whole
		}
		writePkt(&report, fmt.Sprintf("ng %s %s\n", c.Ref, oneLine(reason)))
	}
	report.WriteString("0000")
	if !req.Has("side-band-64k") {
		return report.Bytes()
	}
	var out bytes.Buffer
	for _, line := range strings.Split(strings.TrimSuffix(message, "\n"), "\n") {
		if line != "" {
			writeBand(&out, 2, []byte(line+"\n"))
		}
	}
	writeBand(&out, 1, report.Bytes())
	out.WriteString("0000")
	return out.Bytes()
}

// writeBand writes data on a side band, in packets of at most maxPkt bytes.
func writeBand(w *bytes.Buffer, band byte, data []byte) {
	const room = maxPkt - 5 // length and band byte
	for len(data) > 0 {
		n := min(len(data), room)
		fmt.Fprintf(w, "%04x", n+5)
		w.WriteByte(band)
		w.Write(data[:n])
		data = data[n:]
	}
}

// writePkt writes s as one pkt-line, cut to fit one.
func writePkt(w *bytes.Buffer, s string) {
	if len(s) > maxPkt-4 {
		s = s[:maxPkt-5] + "\n"
	}
	fmt.Fprintf(w, "%04x%s", len(s)+4, s)
}

// oneLine keeps a reason on one line, as a report's line must be.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
