package kube

import (
	"encoding/json"
	"strings"
	"testing"
)

// storedAsAPIServer is what a real API server stored for p (kubee2e's cluster, v1.37): p with the
// defaults its admission adds.
func storedAsAPIServer(t *testing.T, p *Pod) map[string]any {
	t.Helper()
	m, err := toMap(p)
	if err != nil {
		t.Fatal(err)
	}
	m["metadata"].(map[string]any)["resourceVersion"] = "4242"
	m["status"] = map[string]any{"phase": "Pending"}
	spec := m["spec"].(map[string]any)
	for k, v := range map[string]any{
		"dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
		"schedulerName": "default-scheduler", "priority": 0.0, "preemptionPolicy": "PreemptLowerPriority",
		"tolerations": []any{map[string]any{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300.0}},
	} {
		spec[k] = v
	}
	for _, list := range []string{"initContainers", "containers"} {
		for _, c := range spec[list].([]any) {
			c := c.(map[string]any)
			c["terminationMessagePath"] = "/dev/termination-log"
			if _, ok := c["terminationMessagePolicy"]; !ok {
				c["terminationMessagePolicy"] = "File"
			}
			if _, ok := c["resources"]; !ok {
				c["resources"] = map[string]any{}
			}
		}
	}
	return m
}

func container(m map[string]any, name string) map[string]any {
	spec := m["spec"].(map[string]any)
	for _, list := range []string{"initContainers", "containers"} {
		for _, c := range spec[list].([]any) {
			if c.(map[string]any)["name"] == name {
				return c.(map[string]any)
			}
		}
	}
	panic("no container " + name)
}

// TestAdmittedRefusesWhatAWebhookAdds: the pod cordon sent, as the API server's defaults store it,
// passes; each change a mutating admission webhook could make to widen the boundary is refused,
// naming what changed; what only places or orders the pod passes.
func TestAdmittedRefusesWhatAWebhookAdds(t *testing.T) {
	o, err := Render(testInput())
	if err != nil {
		t.Fatal(err)
	}
	sent := *o.Pod
	sent.Spec.SchedulingGates = []SchedulingGate{{Name: GateAdmitted}}
	spec := func(m map[string]any) map[string]any { return m["spec"].(map[string]any) }
	tests := []struct {
		name   string
		mutate func(m map[string]any)
		want   string // "" passes
	}{
		{"as stored", func(map[string]any) {}, ""},
		{"placed and ordered", func(m map[string]any) {
			spec(m)["imagePullSecrets"] = []any{map[string]any{"name": "registry"}}
			spec(m)["nodeSelector"] = map[string]any{"pool": "agents"}
			spec(m)["priorityClassName"] = "low"
			container(m, ContainerAgent)["resources"].(map[string]any)["requests"].(map[string]any)["example.com/gpu"] = "1"
			m["metadata"].(map[string]any)["labels"].(map[string]any)["team"] = "x"
			m["metadata"].(map[string]any)["annotations"] = map[string]any{"example.com/owner": "x"}
		}, ""},
		{"a sidecar", func(m map[string]any) {
			spec(m)["containers"] = append(spec(m)["containers"].([]any), map[string]any{"name": "istio-proxy", "image": "proxy"})
		}, "spec.containers was changed (2 entries sent, 3 stored)"},
		{"an init container first", func(m map[string]any) {
			spec(m)["initContainers"] = append([]any{map[string]any{"name": "istio-init", "image": "proxy"}}, spec(m)["initContainers"].([]any)...)
		}, "spec.initContainers was changed"},
		{"a hostPath volume", func(m map[string]any) {
			spec(m)["volumes"] = append(spec(m)["volumes"].([]any), map[string]any{"name": "host", "hostPath": map[string]any{"path": "/"}})
		}, "spec.volumes was changed"},
		{"a volume's source", func(m map[string]any) {
			for _, v := range spec(m)["volumes"].([]any) {
				if v := v.(map[string]any); v["name"] == volTmp {
					delete(v, "emptyDir")
					v["hostPath"] = map[string]any{"path": "/tmp"}
				}
			}
		}, "spec.volumes[" + volTmp + "].emptyDir was removed"},
		{"a mount into the agent", func(m map[string]any) {
			a := container(m, ContainerAgent)
			a["volumeMounts"] = append(a["volumeMounts"].([]any), map[string]any{"name": volSecret, "mountPath": "/s"})
		}, "spec.containers[agent].volumeMounts was changed"},
		{"a shared process namespace", func(m map[string]any) { spec(m)["shareProcessNamespace"] = true }, "spec.shareProcessNamespace was added"},
		{"a field named to drive the terminal", func(m map[string]any) { spec(m)["x\x1b[2Jy"] = true }, "spec.x?[2Jy was added"},
		{"host aliases", func(m map[string]any) {
			spec(m)["hostAliases"] = []any{map[string]any{"ip": "10.0.0.9", "hostnames": []any{"git.test"}}}
		}, "spec.hostAliases was added"},
		{"the host's network", func(m map[string]any) { spec(m)["hostNetwork"] = true }, "spec.hostNetwork was added"},
		{"a capability", func(m map[string]any) {
			container(m, ContainerAgent)["securityContext"].(map[string]any)["capabilities"].(map[string]any)["add"] = []any{"SYS_ADMIN"}
		}, "spec.containers[agent].securityContext.capabilities.add was added"},
		{"privileged", func(m map[string]any) {
			container(m, ContainerGateway)["securityContext"].(map[string]any)["privileged"] = true
		}, "spec.initContainers[gateway].securityContext.privileged was"},
		{"another uid", func(m map[string]any) {
			container(m, ContainerClone)["securityContext"].(map[string]any)["runAsUser"] = 0.0
		}, "spec.initContainers[clone].securityContext.runAsUser was changed"},
		{"another runtime", func(m map[string]any) { spec(m)["runtimeClassName"] = "runc" }, "spec.runtimeClassName was added"},
		{"an environment variable", func(m map[string]any) {
			a := container(m, ContainerAgent)
			a["env"] = append(a["env"].([]any), map[string]any{"name": "HTTPS_PROXY", "value": "http://10.0.0.9:3128"})
		}, "spec.containers[agent].env was changed"},
		{"another image", func(m map[string]any) { container(m, ContainerGateway)["image"] = "evil:1" }, "spec.initContainers[gateway].image was changed"},
		{"the gate taken away", func(m map[string]any) { delete(spec(m), "schedulingGates") }, "spec.schedulingGates[" + GateAdmitted + "] was removed"},
		{"a queue's gate added", func(m map[string]any) {
			spec(m)["schedulingGates"] = append([]any{map[string]any{"name": "kueue.x-k8s.io/admission"}}, spec(m)["schedulingGates"].([]any)...)
		}, ""},
		{"the run's label changed", func(m map[string]any) {
			m["metadata"].(map[string]any)["labels"].(map[string]any)[LabelRun] = "another"
		}, "label " + LabelRun + " was changed"},
		{"an AppArmor annotation", func(m map[string]any) {
			m["metadata"].(map[string]any)["annotations"] = map[string]any{"container.apparmor.security.beta.kubernetes.io/agent": "unconfined"}
		}, "annotation container.apparmor.security.beta.kubernetes.io/agent was added"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := storedAsAPIServer(t, &sent)
			tt.mutate(m)
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			err = admitted(&sent, raw)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestStoredAsSent: a Secret whose data (the gateway's configuration) or a NetworkPolicy whose
// spec the API server stored otherwise than sent is refused.
func TestStoredAsSent(t *testing.T) {
	o, err := Render(testInput())
	if err != nil {
		t.Fatal(err)
	}
	stored := func(v any, mutate func(m map[string]any)) []byte {
		m, err := toMap(v)
		if err != nil {
			t.Fatal(err)
		}
		m["metadata"].(map[string]any)["uid"] = "u-1"
		mutate(m)
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	tests := []struct {
		name  string
		field string
		sent  any
		fn    func(m map[string]any)
		want  string
	}{
		{"Secret as sent", "data", o.Secret, func(map[string]any) {}, ""},
		{"the gateway's configuration rewritten", "data", o.Secret, func(m map[string]any) {
			m["data"].(map[string]any)["gateway.json"] = "e30="
		}, "data.gateway.json was changed"},
		{"a key added", "data", o.Secret, func(m map[string]any) { m["data"].(map[string]any)["extra"] = "eA==" }, "data.extra was added"},
		{"NetworkPolicy as sent", "spec", o.NetworkPolicy, func(map[string]any) {}, ""},
		{"egress widened", "spec", o.NetworkPolicy, func(m map[string]any) {
			spec := m["spec"].(map[string]any)
			spec["egress"] = append(spec["egress"].([]any), map[string]any{})
		}, "spec.egress was changed"},
		{"an exception dropped", "spec", o.NetworkPolicy, func(m map[string]any) {
			delete(m["spec"].(map[string]any)["egress"].([]any)[0].(map[string]any)["to"].([]any)[0].(map[string]any)["ipBlock"].(map[string]any), "except")
		}, "except was removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := storedAsSent(tt.field, tt.sent, stored(tt.sent, tt.fn))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// FuzzAdmitted: whatever the API server (or something posing as it) answers, the check returns an
// error or nil and never panics (the answer is decoded into untyped JSON and walked by hand). Seeds:
// the pod as sent, and the shapes in testdata/fuzz/FuzzAdmitted.
func FuzzAdmitted(f *testing.F) {
	o, err := Render(testInput())
	if err != nil {
		f.Fatal(err)
	}
	sent := withGate(o.Pod)
	raw, err := json.Marshal(sent)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte(`{"spec":null}`))
	f.Add([]byte(`{"metadata":{"labels":null},"spec":{"containers":[{}]}}`))
	f.Fuzz(func(t *testing.T, stored []byte) {
		_ = admitted(sent, stored)
	})
}
