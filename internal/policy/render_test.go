package policy

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRenderRoundTrip(t *testing.T) {
	data, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	example, err := Parse("example.yaml", data, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	withNetwork := Default()
	withNetwork.Network = &Network{}
	tests := map[string]*Policy{
		"example":       example,
		"default":       Default(),
		"empty network": withNetwork,
		"moved paths": {
			Version: 1, Sandbox: Sandbox{Hostname: "h"},
			Filesystem: Filesystem{
				ReadOnly:  []string{"/a", "/home/a/data"},
				ReadWrite: []string{"/srv/cache", "/b"},
				Targets:   map[string]string{"/home/a/data": "/opt/data", "/srv/cache": "/cache"},
			},
		},
		"caches":    {Version: 1, Sandbox: Sandbox{Hostname: "h"}, Filesystem: Filesystem{Caches: []string{"go", "maven"}, CachesSet: true}},
		"no caches": {Version: 1, Sandbox: Sandbox{Hostname: "h"}, Filesystem: Filesystem{CachesSet: true}},
		"odd limits": {
			Version: 1, Sandbox: Sandbox{AllowNesting: true, Hostname: "h"},
			Limits: Limits{Memory: 1000, Disk: 3 * MiB, CPU: 2, Timeout: 90 * time.Second},
		},
	}
	for name, p := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := p.Render()
			if err != nil {
				t.Fatal(err)
			}
			// A different home proves the rendered paths no longer depend on it.
			back, err := Parse("rendered", out, Options{Home: "/elsewhere"})
			if err != nil {
				t.Fatalf("Render output does not parse: %v\n%s", err, out)
			}
			back.Source, back.SourceSHA256 = p.Source, p.SourceSHA256
			if !reflect.DeepEqual(back, p) {
				t.Errorf("round trip changed the policy\n got %+v\nwant %+v\n%s", back, p, out)
			}
		})
	}
}

func TestRenderReadable(t *testing.T) {
	p := Default()
	p.Limits = Limits{Memory: 4 * GiB, Timeout: 2 * time.Hour}
	p.Network = &Network{Allow: []Endpoint{{Host: "a.example", Ports: []uint16{443}}, {Host: "b.example", Ports: []uint16{22}}}}
	out, err := p.Render()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Effective policy, from (built-in default)\n",
		"memory: 4GiB\n",
		"timeout: 2h\n",
		"- a.example\n",
		"- host: b.example\n      ports: [22]\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("Render output lacks %q:\n%s", want, out)
		}
	}
	out, _ = Default().Render()
	if !strings.Contains(string(out), "no egress") {
		t.Errorf("Render of a policy without network does not say so:\n%s", out)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		2 * time.Hour:                   "2h",
		90 * time.Minute:                "1h30m",
		30 * time.Minute:                "30m",
		time.Hour + 5*time.Second:       "1h0m5s",
		1500 * time.Millisecond:         "1.5s",
		10*time.Minute + 30*time.Second: "10m30s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
