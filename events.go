package cordon

import (
	"errors"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/cordon-sandbox/cordon/internal/audit"
)

// Event is one decision of the run's boundary, as its audit log keeps it: a DNS answer, a
// connection allowed or refused, an HTTP request checked, a credential used (never its value).
// Repeats of one decision are folded into one event with a count.
type Event struct {
	Time     time.Time
	Kind     EventKind
	Decision Decision
	// Name and Port are what the command asked for: the host name it resolved or named.
	Name string
	Port uint16
	// Rule is the policy line that decided ("network.allow[2]: *.github.com:443", "default deny");
	// Reason says why in a few words.
	Rule, Reason string
	// Detail carries protocol facts: the DNS query type, the SNI, the HTTP method and path, the
	// credentials put into a request.
	Detail map[string]string
	// BytesOut and BytesIn count what went to and came from the upstream; Duration is how long a
	// connection lasted.
	BytesOut, BytesIn int64
	Duration          time.Duration
	// Count is how many decisions the event stands for (at least 1); Last is when the last was
	// taken. Group, when set, is the domain under which the folded decisions' names differed ("*"
	// for any name the same rule decided), with a few of the names in Names.
	Count int
	Last  time.Time
	Group string
	Names []string
}

// EventKind is what an Event decided about.
type EventKind string

// The kinds of event.
const (
	// EventDNS is a name the command asked the gateway's resolver for.
	EventDNS = EventKind(audit.KindDNS)
	// EventConnect is a connection the command opened (TCP, TLS by SNI, or a proxy's tunnel).
	EventConnect = EventKind(audit.KindConnect)
	// EventHTTP is one request the gateway read inside a connection it intercepts; its Detail names
	// the credentials put into it.
	EventHTTP = EventKind(audit.KindHTTP)
	// EventInbound is a connection from the host to a port the run published.
	EventInbound = EventKind(audit.KindInbound)
	// EventSSHAgent is a request the command made of its ssh-agent (a signature, or a refusal);
	// Name is the key's comment, Detail its fingerprint and the operation.
	EventSSHAgent = EventKind(audit.KindSSHAgent)
	// EventAudit is the log's own record: what it suppressed at its size limit.
	EventAudit = EventKind(audit.KindAudit)
	// EventService is a step of a fixture service (policy services): started, a fixture applied,
	// removed; Detail["action"] says which.
	EventService = EventKind(audit.KindService)
	// EventLease is a kubernetes run's pod stopping its run because cordon's heartbeat stopped
	// (cordon was killed, or lost the cluster, for longer than sandbox.kubernetes.lease).
	EventLease = EventKind(audit.KindLease)
)

// Decision is an Event's verdict.
type Decision string

// The decisions.
const (
	Allow = Decision(audit.Allow)
	Deny  = Decision(audit.Deny)
)

// auditLogName is the audit log's file in a run's directory.
const auditLogName = "audit.jsonl"

// readEvents reads a run's audit log; a run without network has none, which is no error.
func readEvents(runDir string) ([]Event, error) {
	evs, err := audit.Read(filepath.Join(runDir, auditLogName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	out := make([]Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, eventOf(e))
	}
	return out, err
}

// eventOf is the audit log's event as the library presents it, for Run.Events and Config.OnEvent
// alike.
func eventOf(e audit.Event) Event {
	return Event{
		Time: e.Time, Kind: EventKind(e.Kind), Decision: Decision(e.Decision), Name: e.Name, Port: e.Port,
		Rule: e.Rule, Reason: e.Reason, Detail: e.Detail, BytesOut: e.BytesOut, BytesIn: e.BytesIn,
		Duration: e.Duration, Count: e.Decisions(), Last: e.Last, Group: e.Group, Names: e.Names,
	}
}

// onEvent adapts Config.OnEvent to the audit log's callback; nil stays nil.
func onEvent(f func(Event)) func(audit.Event) {
	if f == nil {
		return nil
	}
	return func(e audit.Event) { f(eventOf(e)) }
}
