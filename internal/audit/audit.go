// Package audit records every decision cordon's boundary takes (a DNS answer, a connection allowed or
// denied, a credential used: never its value) as one JSON object per line in the run's directory, so
// that a user can see afterwards what the agent reached and what it was refused. The log is bounded
// whatever the agent does: repeats of a decision fold into one event with a count (fold.go), and past
// a byte cap the log only counts, ending with one record of what it suppressed.
package audit

import (
	"time"
)

// Event is one decision. Fields that do not apply stay empty and are omitted from the log.
type Event struct {
	Time time.Time `json:"time"`
	// Kind is what was decided about: a name (KindDNS), a connection (KindConnect), a request
	// (KindHTTP), or the log itself (KindAudit).
	Kind Kind `json:"kind"`
	// Name and Port are what the sandbox asked for (the host name it resolved or named, never an
	// address it chose).
	Name string `json:"name,omitempty"`
	Port uint16 `json:"port,omitempty"`
	// Decision is Allow or Deny; empty on the log's own notes (KindAudit).
	Decision Decision `json:"decision"`
	// Rule is the policy line that decided ("network.allow[2]: *.github.com:443", "default deny").
	Rule string `json:"rule,omitempty"`
	// Reason says why in a few words ("not in network.allow", "SNI does not match the name").
	Reason string `json:"reason,omitempty"`
	// Detail carries protocol facts: the DNS query type, the SNI, the HTTP method and path.
	Detail map[string]string `json:"detail,omitempty"`
	// BytesOut and BytesIn count what went to and came from the upstream.
	BytesOut int64 `json:"bytes_out,omitempty"`
	BytesIn  int64 `json:"bytes_in,omitempty"`
	// Duration is how long the connection lasted.
	Duration time.Duration `json:"duration,omitempty"`

	// The fields below are set on an event that stands for several decisions: repeats of one
	// decision folded together so that an agent repeating a refused request cannot grow the log
	// (see fold.go). Time and Detail are then the first folded decision's, the byte counts the sum.

	// Count is how many decisions the event stands for; 0 means one.
	Count int `json:"count,omitempty"`
	// Last is when the last of them was taken.
	Last time.Time `json:"last,omitzero"`
	// Group is set when they named different hosts: the domain they were all under ("evil.test":
	// it and the names below it), or "*" for any name the same rule decided. Name is then the
	// first of them and Names a few more.
	Group string   `json:"group,omitempty"`
	Names []string `json:"names,omitempty"`
}

// Kind is what an event decided about. It is written to the log as its string, which readers of the
// log (cordon log, a user's jq) match on, so the values never change.
type Kind string

// The kinds of event.
const (
	// KindDNS is a name the sandbox asked the gateway's resolver for.
	KindDNS Kind = "dns"
	// KindConnect is a connection the sandbox opened through the gateway (TCP, TLS by SNI, or a
	// proxy request's tunnel).
	KindConnect Kind = "connect"
	// KindHTTP is one request the gateway read inside a connection it intercepts.
	KindHTTP Kind = "http"
	// KindInbound is a connection from the host to a port the run published (cordon run --publish).
	KindInbound Kind = "inbound"
	// KindSSHAgent is a request the sandbox made of its ssh-agent (a signature, or a refused add,
	// remove, lock or extension); Name is the key's comment.
	KindSSHAgent Kind = "ssh-agent"
	// KindAudit is a note of the log about itself (its cap reached, events suppressed or dropped).
	KindAudit Kind = "audit"
	// KindService is a step of a fixture service's life (started, a fixture applied, removed), with
	// no Decision: cordon did it, the sandbox asked for nothing. Name is the service's.
	KindService Kind = "service"
	// KindLease is the end of a run's lease (the kubernetes backend): no heartbeat came from cordon
	// for the lease's length, so the gateway stopped the run. Decision is Deny; Reason says why.
	KindLease Kind = "lease"
)

// Decision is what the boundary decided, written to the log as its string.
type Decision string

// The decisions.
const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
)

// Decisions is how many decisions e stands for: its Count, or one.
func (e Event) Decisions() int { return max(e.Count, 1) }

// Detail keys that the summary counts, set on KindHTTP events by the credential hook. Values name
// credentials and places, never values.
const (
	// DetailCredentials lists the credentials whose real value went into the request and reached
	// the upstream (the request's head was written to it over verified TLS).
	DetailCredentials = "credentials"
	// DetailCredentialsUnsent lists the credentials put into a request that never reached the
	// upstream (its certificate was not verified, it could not be reached, the gateway refused the
	// request after the hook ran): not counted as injected.
	DetailCredentialsUnsent = "credentials_unsent"
	// DetailCredentialMisuse lists placeholders found where their credential is not allowed (another
	// host, another header): the request went out with the placeholder unchanged.
	DetailCredentialMisuse = "credential_misuse"
	// DetailCredentialEchoed counts credential values the upstream's answer held, which the gateway
	// replaced with their placeholders before the sandbox read it.
	DetailCredentialEchoed = "credential_echoed"
)

// Recorder takes events. Implementations must be safe for concurrent use and must never block the
// caller for long: the gateway records on its hot path.
type Recorder interface {
	Record(Event)
}
