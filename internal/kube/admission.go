package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/cordon-sandbox/cordon/internal/warn"
)

// GateAdmitted is the scheduling gate the run's pod is created with: the cluster schedules no
// container of it, cordon's setup step included, until cordon has read back the pod the API server
// stored and found it to be the pod cordon rendered (admitted), and removed the gate.
const GateAdmitted = "cordon.dev/admitted"

// What the API server's defaulting adds to a pod cordon renders (seen on a real API server:
// kubee2e), and what a cluster's admission may add without touching the boundary: where the pod is
// scheduled and with what priority, pull secrets, the RuntimeClass's overhead. Anything else a
// mutating admission webhook adds (a container, a volume, a host alias, a shared process namespace,
// a capability, an environment variable) or changes in what cordon set is refused by admitted.
var (
	podExtras = []string{
		"dnsPolicy", "serviceAccountName", "serviceAccount", "schedulerName", "tolerations", "priority",
		"priorityClassName", "preemptionPolicy", "nodeSelector", "affinity", "topologySpreadConstraints",
		"imagePullSecrets", "overhead",
	}
	containerExtras = []string{"terminationMessagePath", "terminationMessagePolicy", "resources"}
	// Annotations that older kubelets still read as security settings of the pod's containers.
	securityAnnotations = []string{"container.apparmor.security.beta.kubernetes.io/", "seccomp.security.alpha.kubernetes.io/"}
)

// withGate is a copy of p with GateAdmitted added to its scheduling gates.
func withGate(p *Pod) *Pod {
	g := *p
	g.Spec.SchedulingGates = append(slices.Clone(p.Spec.SchedulingGates), SchedulingGate{Name: GateAdmitted})
	return &g
}

// admitted compares the pod the API server stored (raw: its answer to the create, after every
// mutating admission webhook) with the pod cordon sent, and says the first difference that could
// change the run's boundary. Every field cordon set must come back as it was sent; the only fields
// that may be added are podExtras, containerExtras and the containers' resources beyond those set
// (requests). Metadata may gain labels and annotations, but not securityAnnotations.
func admitted(sent *Pod, raw []byte) error {
	want, err := toMap(sent)
	if err != nil {
		return err
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		return fmt.Errorf("decoding the stored pod: %w", err)
	}
	md, _ := got["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		for _, p := range securityAnnotations {
			if strings.HasPrefix(k, p) {
				return fmt.Errorf("annotation %s was added", warn.Printable(k, 200))
			}
		}
	}
	// The labels cordon set select the pod for its NetworkPolicy and for cordon gc: each must stay.
	labels, _ := md["labels"].(map[string]any)
	for _, k := range slices.Sorted(maps.Keys(sent.Labels)) {
		if v, ok := labels[k].(string); !ok || v != sent.Labels[k] {
			return fmt.Errorf("label %s was changed", k)
		}
	}
	wantSpec, _ := want["spec"].(map[string]any)
	gotSpec, ok := got["spec"].(map[string]any)
	if !ok {
		return errors.New("the stored pod has no spec")
	}
	// Other scheduling gates (a queue's, Kueue's) may be added: they hold the pod longer, and ungate
	// removes cordon's alone. cordon's must be there.
	gates, err := otherGates(wantSpec["schedulingGates"], gotSpec["schedulingGates"])
	if err != nil {
		return err
	}
	gotSpec = maps.Clone(gotSpec)
	if gates == nil {
		delete(gotSpec, "schedulingGates")
	} else {
		gotSpec["schedulingGates"] = gates
	}
	return same("spec", "spec", wantSpec, gotSpec, podMayAdd)
}

// otherGates is the entries of got (the stored pod's scheduling gates) that want (the sent pod's)
// has, in want's order: got less the gates others added, for the comparison with what was sent. One
// of want's missing from got is an error.
func otherGates(want, got any) ([]any, error) {
	w, _ := want.([]any)
	g, _ := got.([]any)
	var kept []any
	for _, wg := range w {
		name, _ := wg.(map[string]any)["name"].(string)
		i := slices.IndexFunc(g, func(x any) bool { m, _ := x.(map[string]any); return m["name"] == name })
		if i < 0 {
			return nil, fmt.Errorf("spec.schedulingGates[%s] was removed", name)
		}
		kept = append(kept, g[i])
	}
	return kept, nil
}

// storedAsSent checks that a Secret's data (the gateway's configuration: the policy and the
// credentials) or a NetworkPolicy's spec came back from the API server as cordon sent it: a webhook
// that rewrote the policy the gateway enforces, or widened the pod's egress, refuses the run.
func storedAsSent(field string, sent any, raw []byte) error {
	want, err := toMap(sent)
	if err != nil {
		return err
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		return fmt.Errorf("decoding the stored object: %w", err)
	}
	return same(field, field, want[field], got[field], func(string, string) bool { return false })
}

// same compares want (sent) with got (stored) at path; shape is the path with list indices left out,
// from which mayAdd says which fields may be added there.
func same(path, shape string, want, got any, mayAdd func(shape, key string) bool) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s was changed", path)
		}
		for _, k := range slices.Sorted(maps.Keys(w)) { // sorted: the same difference is named each time
			wv := w[k]
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s.%s was removed", path, k)
			}
			if err := same(path+"."+k, shape+"."+k, wv, gv, mayAdd); err != nil {
				return err
			}
		}
		for _, k := range slices.Sorted(maps.Keys(g)) {
			if _, ok := w[k]; !ok && !mayAdd(shape, k) {
				// The key is the server's: shown, made printable.
				return fmt.Errorf("%s.%s was added", path, warn.Printable(k, 200))
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s was changed (%d entries sent, %s stored)", path, len(w), count(got))
		}
		for i := range w {
			if err := same(fmt.Sprintf("%s[%s]", path, entryName(w[i], i)), shape+"[]", w[i], g[i], mayAdd); err != nil {
				return err
			}
		}
		return nil
	default:
		if !reflect.DeepEqual(want, got) {
			return fmt.Errorf("%s was changed", path)
		}
		return nil
	}
}

// podMayAdd reports whether a field key absent from the pod cordon sent may appear at shape.
func podMayAdd(shape, key string) bool {
	switch shape {
	case "spec":
		return slices.Contains(podExtras, key)
	case "spec.containers[]", "spec.initContainers[]":
		return slices.Contains(containerExtras, key)
	}
	// Requests or claims beside the limits cordon set: they place the pod, they do not widen it.
	return strings.HasPrefix(shape, "spec.containers[].resources") || strings.HasPrefix(shape, "spec.initContainers[].resources")
}

// entryName names a list entry by its name field when it has one (a container, a volume), else by
// its index.
func entryName(v any, i int) string {
	if m, ok := v.(map[string]any); ok {
		if n, ok := m["name"].(string); ok && n != "" {
			return n
		}
	}
	return fmt.Sprint(i)
}

func count(v any) string {
	if l, ok := v.([]any); ok {
		return fmt.Sprint(len(l))
	}
	return "none"
}

// CheckAdmission has the API server store o's Secret and pod in a dry run (its admission, mutating
// webhooks included, runs; nothing is kept) and checks what it would store as Run checks what it
// does store: what cordon doctor says of a cluster before a run is refused there. A webhook with side
// effects refuses dry runs; that error comes back as it is.
func (c *Client) CheckAdmission(ctx context.Context, o *Objects) error {
	dry := url.Values{"dryRun": {"All"}}
	var stored json.RawMessage
	if err := c.do(ctx, http.MethodPost, c.nsPath("", "secrets", ""), dry, o.Secret, &stored); err != nil {
		return fmt.Errorf("a dry run of the run's Secret: %w", err)
	}
	if err := storedAsSent("data", o.Secret, stored); err != nil {
		return fmt.Errorf("the cluster would change the run's Secret: %w", err)
	}
	gated := withGate(o.Pod)
	if err := c.do(ctx, http.MethodPost, c.nsPath("", "pods", ""), dry, gated, &stored); err != nil {
		return fmt.Errorf("a dry run of the run's pod: %w", err)
	}
	if err := admitted(gated, stored); err != nil {
		return fmt.Errorf("the cluster would change the run's pod (a mutating admission webhook?): %w", err)
	}
	return nil
}
