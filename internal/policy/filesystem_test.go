package policy

import (
	"reflect"
	"testing"
)

// TestFilesystemMountAt: a readonly or readwrite entry is a path shown at its own path, or
// {path: HOST, at: PATH} shown at PATH instead (the file form of cordon run -v HOST:PATH).
func TestFilesystemMountAt(t *testing.T) {
	const src = `version: 1
filesystem:
  readonly: [~/.gitconfig, {path: ~/data, at: /opt/data/}, {path: /same, at: /same}]
  readwrite:
    - path: /srv/cache
      at: /cache
    - /tmp/x
`
	p, err := Parse("p.yaml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := Filesystem{
		ReadOnly:  []string{"/home/a/.gitconfig", "/home/a/data", "/same"},
		ReadWrite: []string{"/srv/cache", "/tmp/x"},
		Targets:   map[string]string{"/home/a/data": "/opt/data", "/srv/cache": "/cache"},
	}
	if !reflect.DeepEqual(p.Filesystem, want) {
		t.Errorf("got %+v\nwant %+v", p.Filesystem, want)
	}
	// Without an entry shown elsewhere there are no targets at all, as before the mapping form.
	p, err = Parse("p.yaml", []byte("version: 1\nfilesystem: {readonly: [/a]}\n"), testOpts)
	if err != nil || p.Filesystem.Targets != nil {
		t.Errorf("plain entries: targets %v, err %v", p.Filesystem.Targets, err)
	}
}

// TestFilesystemMountAtErrors: each mistake in the mapping form names its line and column.
func TestFilesystemMountAtErrors(t *testing.T) {
	ws := Options{Home: "/home/a", Workspace: "/home/a/project"}
	for _, tc := range []struct {
		name, fs string
		opts     Options
		want     string
	}{
		{"unknown key", "readonly: [{path: /a, to: /b}]", testOpts,
			"3:25: filesystem.readonly[0].to: unknown field (expected one of path, at)"},
		{"no at", "readonly: [{path: /a}]", testOpts, "3:14: filesystem.readonly[0]: at is required"},
		{"no path", "readwrite: [{at: /b}]", testOpts, "3:15: filesystem.readwrite[0]: path is required"},
		{"at relative", "readonly: [{path: /a, at: b}]", testOpts,
			`3:29: filesystem.readonly[0].at: "b" is not absolute (expected the absolute path it appears at inside the sandbox)`},
		{"at tilde", "readonly: [{path: /a, at: ~/b}]", testOpts,
			`3:29: filesystem.readonly[0].at: "~/b" is not absolute (expected the absolute path it appears at inside the sandbox)`},
		{"at root", "readonly: [{path: /a, at: /}]", testOpts,
			`3:29: filesystem.readonly[0].at: "/" would cover the sandbox's whole file system`},
		{"at empty", `readonly: [{path: /a, at: ""}]`, testOpts, "3:29: filesystem.readonly[0].at: must not be empty"},
		{"at not string", "readonly: [{path: /a, at: [x]}]", testOpts, "3:29: filesystem.readonly[0].at: expected a string, got a list"},
		{"path relative", "readonly: [{path: a, at: /b}]", testOpts,
			`3:21: filesystem.readonly[0].path: "a" is relative (expected an absolute path or one starting with ~/)`},
		{"path root", "readwrite: [{path: /, at: /b}]", testOpts,
			`3:22: filesystem.readwrite[0].path: "/" would expose the host's whole file system`},
		{"twice", "readonly: [/a, {path: /a/, at: /b}]", testOpts, `3:18: filesystem.readonly[1]: "/a" is listed twice`},
		{"both lists", "readonly: [/a]\n  readwrite: [{path: /a, at: /b}]", testOpts,
			`4:15: filesystem.readwrite[0]: "/a" is also listed in readonly`},
		{"same place", "readonly: [{path: /a, at: /x}]\n  readwrite: [{path: /b, at: /x}]", testOpts,
			"4:15: filesystem.readwrite[0]: /b would appear at /x, where /a appears already"},
		{"over a path", "readonly: [/x, {path: /a, at: /x}]", testOpts,
			"3:18: filesystem.readonly[1]: /a would appear at /x, where /x appears already"},
		{"in workspace", "readonly: [{path: /a, at: /home/a/project/sub}]", ws,
			"3:29: filesystem.readonly[0].at: /home/a/project/sub is over the workspace /home/a/project, whose view is the run's own copy"},
		{"over workspace", "readonly: [{path: /a, at: /home/a}]", ws,
			"3:29: filesystem.readonly[0].at: /home/a is over the workspace /home/a/project, whose view is the run's own copy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte("version: 1\nfilesystem:\n  "+tc.fs+"\n"), tc.opts)
			if err == nil || err.Error() != "p.yaml:"+tc.want {
				t.Errorf("got  %v\nwant p.yaml:%s", err, tc.want)
			}
		})
	}
	// Beside the workspace, not over it, is fine.
	if _, err := Parse("p.yaml", []byte("version: 1\nfilesystem: {readonly: [{path: /a, at: /home/a/project2}]}\n"), ws); err != nil {
		t.Errorf("a target beside the workspace: %v", err)
	}
}
