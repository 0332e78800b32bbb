package kube

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"bytes"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/cordon-sandbox/cordon/internal/creds"
	"github.com/cordon-sandbox/cordon/internal/kube/kubepod"
	"github.com/cordon-sandbox/cordon/internal/policy"
)

func testInput() *Input {
	return &Input{
		RunID: "20261201-101010-abcd0123", Namespace: "agents",
		Image: "agent:1", CordonImage: "cordon:1", Repo: "https://git.test/acme/app", Ref: "main",
		Args: []string{"claude", "-p", "fix it"}, Env: []string{"HOME=/home/agent", "API_KEY=placeholder-xyz"},
		Limits: policy.Limits{Memory: 2 << 30, CPU: 1.5, Timeout: time.Hour, Disk: 10 << 30},
		Config: &kubepod.GatewayConfig{Version: kubepod.Version, Policy: []byte("version: 1\n"),
			Credentials: []creds.Exported{{Name: "API_KEY", Placeholder: "placeholder-xyz", Value: "the-real-secret-value"}}},
	}
}

func containers(p *Pod) map[string]Container {
	m := map[string]Container{}
	for _, c := range append(append([]Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		m[c.Name] = c
	}
	return m
}

// TestRenderHoldsTheBoundary checks the pod's security properties one by one: each is a line of
// the boundary that a later edit of Render could drop.
func TestRenderHoldsTheBoundary(t *testing.T) {
	o, err := Render(testInput())
	if err != nil {
		t.Fatal(err)
	}
	p := o.Pod
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("the pod mounts a service-account token")
	}
	if p.Spec.EnableServiceLinks == nil || *p.Spec.EnableServiceLinks {
		t.Error("service links put the cluster's services into the agent's environment")
	}
	if p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC {
		t.Error("the pod shares a host namespace")
	}
	cs := containers(p)
	for _, name := range []string{ContainerSetup, ContainerGateway, ContainerClone, ContainerAgent, ContainerKeeper} {
		c, ok := cs[name]
		if !ok {
			t.Fatalf("no %s container", name)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: privilege escalation not forbidden", name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: writable root file system", name)
		}
		if sc.SeccompProfile == nil && p.Spec.SecurityContext.SeccompProfile == nil {
			t.Errorf("%s: no seccomp profile", name)
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("%s: capabilities not all dropped", name)
		}
		wantAdd := 0
		if name == ContainerSetup {
			wantAdd = 2
			if !slices.Equal(sc.Capabilities.Add, []string{"NET_ADMIN", "NET_RAW"}) {
				t.Errorf("setup adds %v, want NET_ADMIN and NET_RAW only", sc.Capabilities.Add)
			}
		}
		if len(sc.Capabilities.Add) != wantAdd {
			t.Errorf("%s: adds capabilities %v", name, sc.Capabilities.Add)
		}
		if name != ContainerSetup && (sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
			t.Errorf("%s: may run as root", name)
		}
		for _, m := range c.VolumeMounts {
			if m.Name == volSecret && name != ContainerGateway {
				t.Errorf("%s mounts the run's Secret", name)
			}
		}
		for _, e := range c.Env {
			if strings.Contains(e.Value, "the-real-secret-value") {
				t.Errorf("%s has the real credential in its environment (%s)", name, e.Name)
			}
		}
	}
	if uid := *cs[ContainerGateway].SecurityContext.RunAsUser; uid != kubepod.GatewayUID {
		t.Errorf("gateway runs as %d, the redirect exempts %d", uid, kubepod.GatewayUID)
	}
	for _, name := range []string{ContainerClone, ContainerAgent, ContainerKeeper} {
		if *cs[name].SecurityContext.RunAsUser == kubepod.GatewayUID {
			t.Errorf("%s runs as the gateway's uid: its traffic would not be redirected", name)
		}
	}
	if rp := cs[ContainerGateway].RestartPolicy; rp == nil || *rp != "Always" {
		t.Error("the gateway is not a native sidecar: it would not run beside the agent")
	}
	// The init order is the boundary's order: rules before the gateway, the gateway before anything
	// of the agent's image runs.
	var order []string
	for _, c := range p.Spec.InitContainers {
		order = append(order, c.Name)
	}
	if strings.Join(order, ",") != "setup,gateway,clone" {
		t.Errorf("init containers in order %v", order)
	}
	ro := map[string]bool{}
	for _, m := range cs[ContainerAgent].VolumeMounts {
		if m.ReadOnly {
			ro[m.MountPath] = true
		}
	}
	for _, p := range []string{kubepod.Checkout + "/.git/hooks", kubepod.Checkout + "/.git/config", kubepod.BinDir, kubepod.TrustDir} {
		if !ro[p] {
			t.Errorf("%s is writable to the agent", p)
		}
	}
	body, _ := json.Marshal(p)
	if strings.Contains(string(body), "the-real-secret-value") {
		t.Error("the pod's spec holds the real credential")
	}
	if !strings.Contains(string(o.Secret.Data[kubepod.ConfigFile]), "the-real-secret-value") {
		t.Error("the Secret does not carry the credential to the gateway")
	}
	agent := cs[ContainerAgent]
	if got := agent.Resources.Limits["memory"]; got != "2147483648" {
		t.Errorf("memory limit %s", got)
	}
	if got := agent.Resources.Limits["cpu"]; got != "1500m" {
		t.Errorf("cpu limit %s", got)
	}
	if p.Spec.ActiveDeadlineSeconds == nil || *p.Spec.ActiveDeadlineSeconds < 3600 {
		t.Error("no pod deadline behind the run's timeout")
	}
	// limits.disk bounds every volume the agent's container can write.
	writable := map[string]bool{}
	for _, m := range agent.VolumeMounts {
		if !m.ReadOnly {
			writable[m.Name] = true
		}
	}
	for _, v := range p.Spec.Volumes {
		if writable[v.Name] && (v.EmptyDir == nil || v.EmptyDir.SizeLimit != "10737418240") {
			t.Errorf("volume %s, writable by the agent, is not bounded by limits.disk: %+v", v.Name, v.EmptyDir)
		}
	}
	if len(writable) < 3 {
		t.Errorf("the agent writes only %v", writable)
	}
}

func TestRenderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Input)
		want string
	}{
		{"no image", func(in *Input) { in.Image = "" }, "no agent image"},
		{"no cordon image", func(in *Input) { in.CordonImage = "" }, "no cordon image"},
		{"no repo", func(in *Input) { in.Repo = "" }, "no repository"},
		{"no command", func(in *Input) { in.Args = nil }, "no command"},
		{"gateway uid", func(in *Input) { in.AgentUID = kubepod.GatewayUID }, "cannot run as uid"},
		{"keeper uid", func(in *Input) { in.AgentUID = kubepod.KeeperUID }, "cannot run as uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput()
			tc.edit(in)
			if _, err := Render(in); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRenderWithoutConfigHasNoValues(t *testing.T) {
	in := testInput()
	in.Config = nil
	o, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Secret.Data) != 0 {
		t.Fatal("a rendered Secret template has data")
	}
	st, err := SandboxTemplate(o)
	if err != nil {
		t.Fatal(err)
	}
	if st["kind"] != "SandboxTemplate" || st["apiVersion"] != "extensions.agents.x-k8s.io/v1alpha1" {
		t.Fatalf("template is %v %v", st["apiVersion"], st["kind"])
	}
}

// TestRenderMatchesTheAPI decodes every rendered object into k8s.io/api's own types with unknown
// fields refused, and compares what comes back: cordon's types are a subset of the API's, and a
// field name spelled wrong, or a value of the wrong shape, fails here rather than in a cluster.
func TestRenderMatchesTheAPI(t *testing.T) {
	in := testInput()
	in.RuntimeClass = "gvisor"
	in.PinnedAddrs = []string{"10.1.2.3", "fd00::1"}
	o, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		obj  any
		into any
	}{
		{"pod", o.Pod, &corev1.Pod{}},
		{"secret", o.Secret, &corev1.Secret{}},
		{"networkpolicy", o.NetworkPolicy, &networkingv1.NetworkPolicy{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, err := json.Marshal(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(ours))
			dec.DisallowUnknownFields()
			if err := dec.Decode(tc.into); err != nil {
				t.Fatalf("k8s.io/api does not read cordon's %s: %v\n%s", tc.name, err, ours)
			}
			theirs, err := json.Marshal(tc.into)
			if err != nil {
				t.Fatal(err)
			}
			var a, b map[string]any
			_ = json.Unmarshal(ours, &a)
			_ = json.Unmarshal(theirs, &b)
			if missing := lost("", a, b); missing != "" {
				t.Fatalf("%s: k8s.io/api dropped or changed %s", tc.name, missing)
			}
		})
	}
}

// lost names a value of ours that theirs does not hold alike (theirs may add defaults).
func lost(path string, ours, theirs any) string {
	switch o := ours.(type) {
	case map[string]any:
		t, ok := theirs.(map[string]any)
		if !ok {
			return path
		}
		for k, v := range o {
			if m := lost(path+"."+k, v, t[k]); m != "" {
				return m
			}
		}
	case []any:
		t, ok := theirs.([]any)
		if !ok || len(t) != len(o) {
			return path
		}
		for i := range o {
			if m := lost(fmt.Sprintf("%s[%d]", path, i), o[i], t[i]); m != "" {
				return m
			}
		}
	default:
		if fmt.Sprint(ours) != fmt.Sprint(theirs) {
			return path
		}
	}
	return ""
}

func TestDropEcho(t *testing.T) {
	echo := "cordon-attach-v1\r\n"
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"echo then output", []string{echo, "hi"}, "hi"},
		{"echo split", []string{"cordon-", "attach-v1\r", "\nhi"}, "hi"},
		{"no echo", []string{"hello"}, "hello"},
		{"prefix only", []string{"cordon-x"}, "cordon-x"},
		{"echo and output together", []string{echo + "out"}, "out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			d := &dropEcho{w: &b, echo: []byte(echo)}
			for _, w := range tc.writes {
				if _, err := d.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
			}
			if b.String() != tc.want {
				t.Fatalf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

// TestRenderKeepsEnvironmentInSecret checks that the agent's environment reaches its containers
// from the run's Secret, never written in the pod's spec (which whoever may list pods can read, and
// whose inline values the kubelet would expand), and that the gateway's volume shows its
// configuration alone.
func TestRenderKeepsEnvironmentInSecret(t *testing.T) {
	in := testInput()
	in.Env = append(in.Env, "LITERAL=$(HOME)/not-expanded", "EMPTY=")
	o, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(o.Pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"placeholder-xyz", "not-expanded"} {
		if bytes.Contains(spec, []byte(v)) {
			t.Errorf("the pod's spec holds the environment's value %q", v)
		}
	}
	cs := containers(o.Pod)
	for _, name := range []string{ContainerClone, ContainerAgent} {
		env := cs[name].Env
		if len(env) != len(in.Env) {
			t.Fatalf("%s has %d variables, want %d", name, len(env), len(in.Env))
		}
		for i, kv := range in.Env {
			k, v, _ := strings.Cut(kv, "=")
			e := env[i]
			if e.Name != k || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("%s: variable %d is %+v, want %s from the Secret", name, i, e, k)
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != o.Secret.Name || ref.Key == kubepod.ConfigFile {
				t.Errorf("%s: %s comes from %s/%s", name, k, ref.Name, ref.Key)
			}
			if got, ok := o.Secret.Data[ref.Key]; !ok || string(got) != v {
				t.Errorf("%s: %s's key %s holds %q (present %v), want %q", name, k, ref.Key, got, ok, v)
			}
		}
	}
	for _, c := range cs {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Key == kubepod.ConfigFile {
				t.Errorf("%s's %s is the gateway's configuration", c.Name, e.Name)
			}
		}
	}
	for _, v := range o.Pod.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		if len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != kubepod.ConfigFile {
			t.Errorf("the gateway's Secret volume shows %+v, want %s alone", v.Secret.Items, kubepod.ConfigFile)
		}
	}
	// cordon kube render (no configuration) still shows where each value goes.
	in.Config = nil
	if o, err = Render(in); err != nil {
		t.Fatal(err)
	}
	if got := o.Secret.StringData[envKeyPrefix+"1"]; got != "placeholder-xyz" {
		t.Errorf("rendered without a configuration, API_KEY's key holds %q", got)
	}
}
