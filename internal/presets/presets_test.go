package presets

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cordon-sandbox/cordon/internal/policy"
)

// fakeTools answers like the real tools would, configured for a private mirror.
func fakeTools(out map[string]string) func(context.Context, []string, string, ...string) ([]byte, error) {
	return func(_ context.Context, _ []string, name string, args ...string) ([]byte, error) {
		if o, ok := out[name]; ok {
			return []byte(o), nil
		}
		return nil, errors.New(name + ": not installed")
	}
}

func TestPresetsReadTheToolsConfiguration(t *testing.T) {
	src := Source{Run: fakeTools(map[string]string{
		"npm":     "https://npm.mirror.internal:8443/\n",
		"go":      "https://goproxy.mirror.internal,direct\nsum.mirror.internal+abc123\n",
		"python3": "https://pypi.mirror.internal/simple\nhttp://files.mirror.internal/\n",
	})}
	for _, tc := range []struct {
		preset string
		want   []policy.Endpoint
	}{
		{"npm", []policy.Endpoint{{Host: "npm.mirror.internal", Ports: []uint16{8443}}}},
		{"go", []policy.Endpoint{{Host: "goproxy.mirror.internal", Ports: []uint16{443}}, {Host: "sum.mirror.internal", Ports: []uint16{443}}}},
		{"pypi", []policy.Endpoint{{Host: "pypi.mirror.internal", Ports: []uint16{443}}, {Host: "files.mirror.internal", Ports: []uint16{80}}}},
	} {
		got, err := src.Preset(tc.preset)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, %v; want %v", tc.preset, got, err, tc.want)
		}
	}
}

func TestPresetErrors(t *testing.T) {
	src := Source{Run: fakeTools(map[string]string{"npm": "not a url\n", "go": "off\noff\n"})}
	for preset, want := range map[string]string{
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
	src := Source{Env: []string{"PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin", "HOME=" + t.TempDir(),
		"GOPROXY=https://goproxy.example.test", "GOSUMDB=off", "npm_config_registry=https://npm.example.test/",
		"PIP_INDEX_URL=https://pypi.example.test/simple", "PIP_CONFIG_FILE=/dev/null"}}
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
