// Package kubepod is the contract between cordon outside a Kubernetes cluster (which renders a run's
// pod and Secret and collects the run's results) and the pieces of cordon inside that pod (the setup
// step, the gateway sidecar, the clone step, the agent's wrapper and the keeper). Both sides are the
// same binary at possibly different versions, so everything that crosses is named here, once: the
// identities, the paths, the subcommands and the files' formats, with a version that the inside
// refuses when it does not know it.
//
// The pod, in the order kubelet starts it:
//
//  1. init "setup" (cordon image, root with CAP_NET_ADMIN and CAP_NET_RAW only): copies cordon's
//     binary to BinDir for the containers of other images and installs the redirect rules in the
//     pod's network namespace: every TCP connection and DNS query of every uid but GatewayUID goes to
//     the gateway, anything else is dropped (nftables; on gVisor, whose netstack has none, xtables,
//     which travel on a raw socket). It exits before anything else starts.
//  2. init "gateway", a native sidecar (restartPolicy Always; cordon image, GatewayUID): reads
//     SecretDir/ConfigFile, serves the pod's loopback, writes TrustDir/TrustBundle and then ReadyFile
//     (the clone step waits for it), and the audit log to AuditDir/AuditFile. The only container holding
//     credentials.
//  3. init "clone" (agent image, AgentUID): fetches the repository at the ref through the gateway into
//     WorkspaceDir/Checkout, and writes the commit it checked out as its termination message.
//  4. "agent" (agent image, AgentUID, read-only root, no capabilities): the wrapper runs the command in
//     the checkout (.git/hooks and .git/config mounted read-only), and when it has ended writes the
//     changes against the commit to OutDir/PatchFile and its status to OutDir/StatusFile, then exits
//     with the command's status.
//  5. "keeper" (cordon image, KeeperUID): holds the pod open after the agent has exited, so that
//     cordon can fetch OutDir and the audit log through the API (exec of the Fetch subcommand).
//
// The run's lease: while cordon runs, it keeps an exec of the Lease subcommand open in the gateway's
// container and sends it a heartbeat (HeartbeatEvery), which touches TrustDir/LeaseFile. When no
// heartbeat has come for GatewayConfig.LeaseSeconds (cordon was killed, or lost the cluster), the
// gateway writes TrustDir/StopFile, stops serving (egress stops, open connections are cut) and does
// not serve again if its container restarts; the wrapper, seeing StopFile, ends the command as a
// timeout would and makes its patch, which the keeper holds for cordon gc. A pod outlives its cordon
// by one lease at most.
package kubepod

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/sandbox"
)

// Ports are where the gateway listens on the pod's loopback. The redirect sends every DNS query,
// whatever its port, to DNS, so all three are above 1024: the gateway needs no capability to bind them.
func Ports() sandbox.EgressPorts {
	return sandbox.EgressPorts{Transparent: 15001, Proxy: 3128, DNS: 15053}
}

// Version is the format of ConfigFile, StatusFile and Fetch's stream. The inside refuses another,
// and a config with a field it does not know (a gateway older than the cordon that rendered the
// pod refuses a lease it could not keep).
const Version = 1

// Identities inside the pod. The redirect exempts GatewayUID only; the agent, the clone step and the
// keeper are each some other uid, never 0 and never GatewayUID, with no capabilities and
// no_new_privs, so none of them can become the gateway.
const (
	GatewayUID = 15000
	KeeperUID  = 15001
	AgentUID   = 1000 // the default; the policy's user may name another (never 0, GatewayUID or KeeperUID)
)

// Paths inside the pod's containers.
const (
	// BinaryInImage is cordon's static binary in the cordon image.
	BinaryInImage = "/cordon"
	// BinDir holds the copy of cordon's binary (Binary) that setup makes for the containers of the
	// agent's image (emptyDir, read-only to them).
	BinDir = "/run/cordon/bin"
	Binary = BinDir + "/cordon"
	// SecretDir is the run's Secret, mounted into the gateway only.
	SecretDir  = "/run/cordon/secret"
	ConfigFile = "gateway.json" // a GatewayConfig, as JSON
	// TrustDir is written by the gateway and read-only to the clone step and the agent.
	TrustDir    = "/run/cordon/trust"
	TrustBundle = "ca-bundle.pem" // GatewayConfig.Roots, CAFile and the run's CA: what SSL_CERT_FILE names
	// RunCA is what the pod trusts beyond Roots (NODE_EXTRA_CA_CERTS, which adds to Node's own
	// roots): the run's CA and CAFile, as the local sandbox's TrustedCAPath holds them. It is empty
	// when the gateway intercepts nothing and the policy names no CA file.
	RunCA     = "run-ca.pem"
	ReadyFile = "ready" // exists once the gateway serves
	// LeaseFile is touched by the Lease subcommand at every heartbeat of cordon's; its modification
	// time is the lease's last renewal.
	LeaseFile = "lease"
	// StopFile exists once the gateway has stopped because the lease lapsed; it holds the reason, one
	// line. Only the gateway's uid can write TrustDir, so nothing the agent does makes or removes it.
	StopFile = "stopped"
	// AuditDir is the gateway's audit log (emptyDir: written by the gateway, read-only to the keeper).
	AuditDir  = "/run/cordon/audit"
	AuditFile = "audit.jsonl"
	// WorkspaceDir is the workspace (emptyDir); Checkout is the repository's working tree in it.
	WorkspaceDir = "/workspace"
	Checkout     = WorkspaceDir + "/src"
	// OutDir is written by the agent's wrapper and read-only to the keeper.
	OutDir     = "/run/cordon/out"
	PatchFile  = "changes.patch" // `git diff --binary` of the checkout against the commit, untracked files included
	StatusFile = "status.json"   // a Status
)

// Subcommands of cordon's binary that the pod runs (argv after the binary).
var (
	SetupArgs   = []string{"kube", "setup"}   // + --gateway-uid N --copy-to Binary
	GatewayArgs = []string{"kube", "gateway"} // + --config SecretDir/ConfigFile
	ReadyArgs   = []string{"kube", "ready"}   // exit 0 once TrustDir/ReadyFile exists (a probe, for those who want one)
	CloneArgs   = []string{"kube", "clone"}   // + --wait-ready TrustDir --repo URL --ref REF --dir Checkout
	AgentArgs   = []string{"kube", "agent"}   // + [--attach] --dir Checkout [--base COMMIT] -- CMD... (no --base: the checkout's detached HEAD)
	KeeperArgs  = []string{"kube", "keep"}    // waits for SIGTERM
	FetchArgs   = []string{"kube", "fetch"}   // writes a Bundle of OutDir and the audit log to stdout
	LeaseArgs   = []string{"kube", "lease"}   // + --dir TrustDir: renews the lease at every byte on stdin
)

// DefaultLease is GatewayConfig.LeaseSeconds when the policy names no sandbox.kubernetes.lease
// (whose least value is policy.MinKubeLease).
const DefaultLease = 30 * time.Second

// HeartbeatEvery is how often cordon renews a lease of the given length: often enough that a few
// heartbeats lost to a slow API server do not end the run.
func HeartbeatEvery(lease time.Duration) time.Duration {
	return min(max(lease/6, 500*time.Millisecond), 5*time.Second)
}

// GatewayLine is one line of the gateway's standard output, which cordon follows in the gateway
// container's log to show the user what the local run shows on the terminal: Cordon is the line's
// kind (LineNotice, LineUpstream; a kind this cordon does not know is shown as a notice), Line the
// text. The gateway's own diagnostics go to its standard error. No line holds a credential.
type GatewayLine struct {
	Cordon string `json:"cordon"`
	Line   string `json:"line"`
}

// Kinds of GatewayLine.
const (
	// LineNotice is a refusal: a host, name or request the policy does not allow, with the fix
	// (the local run's WarningBlocked).
	LineNotice = "notice"
	// LineUpstream is an allowed host the gateway could not reach or whose certificate it could not
	// verify (the local run's WarningUpstream).
	LineUpstream = "upstream"
)

// AttachHello is what cordon writes to the agent's stdin once its attach stream is open; with
// --attach, the wrapper reads it before it starts the command, so that none of the command's output
// is written before anyone reads it (a pod's attach, unlike its log, does not replay).
const AttachHello = "cordon-attach-v1\n"

// GatewayConfig is everything the gateway in the pod needs, written by cordon into the run's Secret.
// It holds the credentials' real values: it is never printed, logged or rendered.
type GatewayConfig struct {
	Version int    `json:"version"`
	RunID   string `json:"runID"`
	// PolicyName names the policy in messages (its file's path on the machine that ran cordon).
	PolicyName string `json:"policyName"`
	// Policy is the policy file's bytes, parsed again inside with policy.Parse; Allow are the run's
	// --allow additions, appended to network.allow as cordon run does locally.
	Policy []byte   `json:"policy"`
	Allow  []string `json:"allow,omitempty"`
	// Hostname is the pod's host name (the agent's DNS answers it with loopback).
	Hostname string `json:"hostname"`
	// Credentials are the run's prepared credentials (creds.Set.Export): the placeholders the agent
	// has and the values the gateway puts in their place.
	Credentials []creds.Exported `json:"credentials,omitempty"`
	// Roots are the certificate authorities (PEM) the gateway verifies upstreams with when the policy
	// names none (network.tls.caFile is in Policy's own terms and read where cordon ran: it is sent
	// here as CAFile), and that go into TrustBundle for the agent beside the run's CA. The cordon
	// image has none of its own.
	Roots  []byte `json:"roots,omitempty"`
	CAFile []byte `json:"caFile,omitempty"`
	// AuditMaxBytes caps the audit log; 0 means the default.
	AuditMaxBytes int64 `json:"auditMaxBytes,omitempty"`
	// LeaseSeconds is how long the gateway serves without a heartbeat from cordon (TrustDir/LeaseFile
	// renewed) before it stops the run; 0 is no lease (a gateway run by hand or by a test).
	LeaseSeconds int `json:"leaseSeconds,omitempty"`
}

// Check refuses a config of another version or without a policy.
func (c *GatewayConfig) Check() error {
	switch {
	case c.Version != Version:
		return fmt.Errorf("kubepod: gateway config version %d, this cordon reads %d (the pod's cordon image and the cordon that started the run differ)", c.Version, Version)
	case len(c.Policy) == 0:
		return errors.New("kubepod: gateway config without a policy")
	case c.LeaseSeconds < 0:
		return fmt.Errorf("kubepod: gateway config with a lease of %d seconds", c.LeaseSeconds)
	}
	return nil
}

// Status is what the agent's wrapper reports when the command has ended.
type Status struct {
	Version int `json:"version"`
	// Base is the commit the patch is against (as the clone step checked it out).
	Base string `json:"base"`
	// PatchError, when set, says why no patch could be made (PatchFile is then absent).
	PatchError string `json:"patchError,omitempty"`
	// Stopped, when set, says why the wrapper ended the command before it ended by itself: the run's
	// lease lapsed (StopFile's reason).
	Stopped string `json:"stopped,omitempty"`
}

// Bundle is Fetch's output: one JSON object per line, in this order: a header, then the patch and the
// audit log each as a run of chunks. Chunks carry bytes (base64 in JSON), so nothing the agent wrote
// can forge the framing.
type Bundle struct {
	Header *BundleHeader `json:"header,omitempty"`
	// Part is "patch" or "audit"; Data is the next piece of that file.
	Part string `json:"part,omitempty"`
	Data []byte `json:"data,omitempty"`
	// End closes the bundle with each part's total size, so a cut stream is an error.
	End *BundleEnd `json:"end,omitempty"`
}

// BundleHeader opens a Bundle.
type BundleHeader struct {
	Version int     `json:"version"`
	Status  *Status `json:"status,omitempty"` // nil when the wrapper wrote none (it did not finish)
}

// BundleEnd closes a Bundle.
type BundleEnd struct {
	PatchBytes int64 `json:"patchBytes"`
	AuditBytes int64 `json:"auditBytes"`
	HasPatch   bool  `json:"hasPatch"`
}

// Parts of a Bundle.
const (
	PartPatch = "patch"
	PartAudit = "audit"
)

// MaxPatchBytes and MaxAuditBytes bound what cordon reads back from a pod.
const (
	MaxPatchBytes = 256 << 20
	MaxAuditBytes = 256 << 20
)

// ChunkBytes is the size of one Bundle chunk before base64.
const ChunkBytes = 48 << 10

// ReadBundle reads a Bundle from r, writing the patch to patch and the audit log to audit, and
// returns the header. A stream that is cut, out of order, over the limits, or of another version is
// an error. It is ReadBundleWith at MaxPatchBytes and MaxAuditBytes.
func ReadBundle(r io.Reader, patch, audit io.Writer) (*BundleHeader, *BundleEnd, error) {
	return ReadBundleWith(r, patch, audit, Limits{PatchBytes: MaxPatchBytes, AuditBytes: MaxAuditBytes})
}

// WriteBundle writes a Bundle of the given files' contents to w (the Fetch side).
func WriteBundle(w io.Writer, status *Status, patch, audit io.Reader) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(Bundle{Header: &BundleHeader{Version: Version, Status: status}}); err != nil {
		return err
	}
	end := BundleEnd{HasPatch: patch != nil}
	for _, p := range []struct {
		name string
		r    io.Reader
		n    *int64
	}{{PartPatch, patch, &end.PatchBytes}, {PartAudit, audit, &end.AuditBytes}} {
		if p.r == nil {
			continue
		}
		buf := make([]byte, ChunkBytes)
		for {
			n, err := io.ReadFull(p.r, buf)
			if n > 0 {
				if werr := enc.Encode(Bundle{Part: p.name, Data: buf[:n]}); werr != nil {
					return werr
				}
				*p.n += int64(n)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("kubepod: reading %s: %w", p.name, err)
			}
		}
	}
	return enc.Encode(Bundle{End: &end})
}
