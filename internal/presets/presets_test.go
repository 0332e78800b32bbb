package presets

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// fakeTools answers like the real tools would, configured for a private mirror.
func fakeTools(out map[string]string) func(context.Context, []string, string, string, ...string) ([]byte, error) {
	return func(_ context.Context, _ []string, _, name string, args ...string) ([]byte, error) {
		if o, ok := out[name]; ok {
			return []byte(o), nil
		}
		return nil, errors.New(name + ": not installed")
	}
}

func TestPresetsReadTheToolsConfiguration(t *testing.T) {
	src := Source{Run: fakeTools(map[string]string{
		"npm":     `{"registry": "https://npm.mirror.internal:8443/"}`,
		"go":      "https://goproxy.mirror.internal,direct\nsum.mirror.internal+abc123\n\n\n\n\n/nonexistent\n",
		"python3": "index-url https://pypi.mirror.internal/simple\nextra-index-url http://files.mirror.internal/\n",
		"apt-get": "'http://deb.mirror.internal/debian/dists/bookworm/InRelease' deb.mirror.internal_debian_dists_bookworm_InRelease 0 \n" +
			"'http://deb.mirror.internal/debian/dists/bookworm/main/binary-amd64/Packages.xz' x 0 \n" +
			"'https://apt.vendor.internal:8443/repo/dists/stable/InRelease' y 0 \n" +
			"'file:/srv/local-repo/./InRelease' z 0 \n",
	})}
	for _, tc := range []struct {
		preset string
		want   []policy.Endpoint
	}{
		{"npm", []policy.Endpoint{{Host: "npm.mirror.internal", Ports: []uint16{8443}}}},
		{"go", []policy.Endpoint{{Host: "goproxy.mirror.internal", Ports: []uint16{443}}, {Host: "sum.mirror.internal", Ports: []uint16{443}}}},
		{"pypi", []policy.Endpoint{{Host: "pypi.mirror.internal", Ports: []uint16{443}}, {Host: "files.mirror.internal", Ports: []uint16{80}}}},
		{"apt", []policy.Endpoint{{Host: "deb.mirror.internal", Ports: []uint16{80}}, {Host: "apt.vendor.internal", Ports: []uint16{8443}}}},
	} {
		got, err := src.Preset(tc.preset)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, %v; want %v", tc.preset, got, err, tc.want)
		}
	}
}

func TestPresetErrors(t *testing.T) {
	src := Source{Run: fakeTools(map[string]string{"npm": `{"registry": "not a url"}`, "go": "off\noff\n\n\n\n\n\n", "apt-get": "'mirror+http://mirrors.internal/list.txt' x 0\n"})}
	for preset, want := range map[string]string{
		"apt":    "not a registry URL",
		"npm":    "not a registry URL",
		"go":     "names no registry",
		"pypi":   "not installed",
		"nosuch": "unknown preset",
	} {
		if _, err := src.Preset(preset); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error with %q", preset, err, want)
		}
	}
}

// TestPresetsFromRealTools runs the real tools where they are installed, configured through their own
// environment variables, so that the parsing meets the real output.
func TestPresetsFromRealTools(t *testing.T) {
	home := t.TempDir()
	// go's telemetry off: in a fresh home, go starts a child that writes there after go exits, which
	// races with the removal of the temporary home.
	if err := os.MkdirAll(filepath.Join(home, ".config", "go", "telemetry"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "go", "telemetry", "mode"), []byte("off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := Source{Env: []string{"PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin", "HOME=" + home,
		"GOPROXY=https://goproxy.example.test", "GOSUMDB=off", "npm_config_registry=https://npm.example.test/",
		"PIP_INDEX_URL=https://pypi.example.test/simple", "PIP_CONFIG_FILE=/dev/null"}}
	// apt reads the sources an APT_CONFIG file points it at: one-line and deb822 forms, one disabled.
	apt := t.TempDir()
	for name, body := range map[string]string{
		"sources.list":        "deb https://apt.example.test:8443/debian bookworm main\n",
		"parts/m.sources":     "Types: deb\nURIs: http://mirror.example.test/debian\nSuites: bookworm\nComponents: main\n\nTypes: deb\nEnabled: no\nURIs: http://disabled.example.test/x\nSuites: s\nComponents: main\n",
		"parts/old.list.bak":  "deb http://ignored.example.test/debian bookworm main\n",
		"lists/partial/.keep": "",
		"apt.conf": fmt.Sprintf("Dir::Etc::sourcelist %q;\nDir::Etc::sourceparts %q;\nDir::State::lists %q;\nDir::Cache %q;\n",
			apt+"/sources.list", apt+"/parts", apt+"/lists", apt+"/cache"),
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(apt, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(apt, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src.Env = append(src.Env, "APT_CONFIG="+apt+"/apt.conf")
	if eps, err := src.Preset("apt"); err != nil {
		if strings.Contains(err.Error(), "executable file not found") {
			t.Logf("apt: not installed, skipped: %v", err)
		} else {
			t.Errorf("apt: %v", err)
		}
	} else if want := []policy.Endpoint{{Host: "apt.example.test", Ports: []uint16{8443}}, {Host: "mirror.example.test", Ports: []uint16{80}}}; !endpointsEqual(eps, want) {
		t.Errorf("apt: got %v, want %v (in any order)", eps, want)
	}
	for preset, host := range map[string]string{"go": "goproxy.example.test", "npm": "npm.example.test", "pypi": "pypi.example.test"} {
		eps, err := src.Preset(preset)
		if err != nil {
			if strings.Contains(err.Error(), "executable file not found") || strings.Contains(err.Error(), "No module named") {
				t.Logf("%s: tool not installed, skipped: %v", preset, err)
				continue
			}
			t.Errorf("%s: %v", preset, err)
			continue
		}
		if len(eps) == 0 || eps[0].Host != host {
			t.Errorf("%s: got %v, want %s first", preset, eps, host)
		}
	}
}

// endpointsEqual compares endpoint lists in any order.
func endpointsEqual(a, b []policy.Endpoint) bool {
	key := func(e policy.Endpoint) string { return fmt.Sprint(e.Host, e.Ports) }
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		ka[i] = key(a[i])
	}
	for i := range b {
		kb[i] = key(b[i])
	}
	slices.Sort(ka)
	slices.Sort(kb)
	return slices.Equal(ka, kb)
}

// TestPresetToolsNeverRunFromTheProject: an npm planted in the project's node_modules/.bin, first
// on the caller's PATH (as a developer's shell often has it), would run on the host, outside every
// boundary, when cordon asks npm for its registries. It is passed over for the npm next on PATH,
// outside the project: the planted one leaves no mark and its registry is not allowed.
func TestPresetToolsNeverRunFromTheProject(t *testing.T) {
	root := t.TempDir()
	project, outside := filepath.Join(root, "project"), filepath.Join(root, "bin")
	planted := filepath.Join(project, "node_modules", ".bin")
	marker := filepath.Join(root, "planted-ran")
	for dir, script := range map[string]string{
		planted: "#!/bin/sh\ntouch " + marker + "\necho '{\"registry\": \"https://evil.test/\"}'\n",
		outside: "#!/bin/sh\necho '{\"registry\": \"https://npm.mirror.test/\"}'\n",
	} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "npm"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := planted + ":" + outside + ":/usr/bin:/bin"
	t.Setenv("PATH", path) // cordon's own PATH is the caller's too
	src := Source{Workspace: project, Env: []string{"PATH=" + path, "HOME=" + root}}
	eps, err := src.Preset("npm")
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, e := range eps {
		hosts = append(hosts, e.Host)
	}
	if !slices.Contains(hosts, "npm.mirror.test") || slices.Contains(hosts, "evil.test") {
		t.Errorf("npm preset allows %v, want the outside npm's registry alone", hosts)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the npm planted in the project ran on the host")
	}
}
