package kubepod

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// TerminationLog is the file a container's last words go to (Kubernetes' default
// terminationMessagePath): the clone step writes the commit it checked out there, or its one-line
// error, and cordon reads it from the pod's status.
const TerminationLog = "/dev/termination-log"

// Limits bound what ReadBundleWith accepts of each part.
type Limits struct {
	PatchBytes, AuditBytes int64
}

// MaxRecordBytes bounds one line of a Bundle: a chunk is ChunkBytes in base64 with a little JSON
// around it, a header a Status. The bound holds the reader's memory to a line, whatever the stream.
const MaxRecordBytes = 1 << 20

// ReadBundleWith is ReadBundle with the parts' limits given. Beyond the limits it refuses a line
// over MaxRecordBytes, and patch bytes in a bundle whose end says it has no patch.
func ReadBundleWith(r io.Reader, patch, audit io.Writer, lim Limits) (*BundleHeader, *BundleEnd, error) {
	dec := json.NewDecoder(&lineLimit{r: r, max: MaxRecordBytes})
	var hdr *BundleHeader
	var np, na int64
	for {
		var b Bundle
		if err := dec.Decode(&b); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil, errors.New("kubepod: the pod's bundle ended before its end record")
			}
			return nil, nil, fmt.Errorf("kubepod: reading the pod's bundle: %w", err)
		}
		switch {
		case b.Header != nil:
			if hdr != nil {
				return nil, nil, errors.New("kubepod: bundle has two headers")
			}
			if b.Header.Version != Version {
				return nil, nil, fmt.Errorf("kubepod: bundle version %d, this cordon reads %d", b.Header.Version, Version)
			}
			hdr = b.Header
		case hdr == nil:
			return nil, nil, errors.New("kubepod: bundle does not start with a header")
		case b.End != nil:
			if b.End.PatchBytes != np || b.End.AuditBytes != na {
				return nil, nil, fmt.Errorf("kubepod: bundle cut short: %d/%d patch bytes, %d/%d audit bytes", np, b.End.PatchBytes, na, b.End.AuditBytes)
			}
			if !b.End.HasPatch && np > 0 {
				return nil, nil, errors.New("kubepod: bundle has patch bytes but says it has no patch")
			}
			return hdr, b.End, nil
		case b.Part == PartPatch:
			if np += int64(len(b.Data)); np > lim.PatchBytes {
				return nil, nil, fmt.Errorf("kubepod: the run's changes are over %s", size(lim.PatchBytes))
			}
			if _, err := patch.Write(b.Data); err != nil {
				return nil, nil, fmt.Errorf("kubepod: writing the run's changes: %w", err)
			}
		case b.Part == PartAudit:
			if na += int64(len(b.Data)); na > lim.AuditBytes {
				return nil, nil, fmt.Errorf("kubepod: the run's audit log is over %s", size(lim.AuditBytes))
			}
			if _, err := audit.Write(b.Data); err != nil {
				return nil, nil, fmt.Errorf("kubepod: writing the run's audit log: %w", err)
			}
		default:
			return nil, nil, fmt.Errorf("kubepod: bundle record of unknown part %q", b.Part)
		}
	}
}

// size says n bytes in MiB when it is a whole number of them.
func size(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// lineLimit passes r through and fails once a line (bytes between newlines) is longer than max, so
// that a JSON decoder above it never buffers more than a line.
type lineLimit struct {
	r    io.Reader
	max  int
	line int
}

func (l *lineLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			l.line += len(rest)
			break
		}
		l.line += i
		if l.line > l.max {
			break
		}
		l.line, rest = 0, rest[i+1:]
	}
	if l.line > l.max {
		return 0, fmt.Errorf("a record is over %d bytes", l.max)
	}
	return n, err
}
