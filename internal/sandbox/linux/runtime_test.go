//go:build linux

package linux

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestFirstError(t *testing.T) {
	log := `{"msg":"Starting","level":"info"}
{"msg":"error setting up chroot: no /tmp","level":"error"}
{"msg":"running container: creating container: EOF","level":"error"}
`
	if got := firstError(log); got != "error setting up chroot: no /tmp" {
		t.Errorf("firstError = %q", got)
	}
	if got := firstError("not json\n{\"msg\":\"x\",\"level\":\"warning\"}\n"); got != "" {
		t.Errorf("firstError of no error = %q", got)
	}
}

func TestNamesFile(t *testing.T) {
	event := func(name string) []byte {
		n := (len(name) + 1 + 15) &^ 15
		b := make([]byte, unix.SizeofInotifyEvent+n)
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		ev.Len = uint32(n)
		copy(b[unix.SizeofInotifyEvent:], name)
		return b
	}
	buf := append(event("config.json"), event("pid")...)
	if !namesFile(buf, "pid") || namesFile(buf, "pi") || namesFile(event("pidx"), "pid") {
		t.Error("namesFile matched wrongly")
	}
	if namesFile(buf[:len(buf)-1], "pid") {
		t.Error("a truncated event matched")
	}
}

// TestExistingBinds: binds whose source the built root lacks are dropped, others kept with every
// field, a source outside the built root refuses the config.
func TestExistingBinds(t *testing.T) {
	// Sources are paths under newRoot, which only init's scratch root has.
	if _, err := os.Stat(newRoot); err == nil {
		t.Skip(newRoot + " exists on this host, so a missing source cannot be made")
	}
	config := map[string]any{
		"ociVersion": "1.0.2",
		"mounts": []any{
			map[string]any{"destination": "/dev/shm", "type": "tmpfs", "source": "shm"},
			map[string]any{"destination": "/w/.env", "type": "bind", "source": newRoot + "/w/.env", "options": []string{"rbind", "ro"}},
		},
	}
	b, _ := json.Marshal(config)
	out, err := existingBinds(b)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), ".env") || !strings.Contains(string(out), "/dev/shm") || !strings.Contains(string(out), "ociVersion") {
		t.Errorf("existingBinds kept a missing source or dropped the rest: %s", out)
	}
	config["mounts"] = []any{map[string]any{"destination": "/etc/shadow", "type": "bind", "source": filepath.Join("/etc", "shadow")}}
	b, _ = json.Marshal(config)
	if _, err := existingBinds(b); err == nil {
		t.Error("a bind from outside the built root was accepted")
	}
	// The prefix alone is not enough: ".." leaves the built root by a path that starts inside it.
	config["mounts"] = []any{map[string]any{"destination": "/etc/shadow", "type": "bind", "source": newRoot + "/../etc/shadow"}}
	b, _ = json.Marshal(config)
	if _, err := existingBinds(b); err == nil {
		t.Error("a bind from outside the built root, through .., was accepted")
	}
}
