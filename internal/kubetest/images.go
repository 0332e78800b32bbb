package kubetest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// AgentUID and AgentGID are the agent image's user ("agent" in its /etc/passwd).
const (
	AgentUID = 1000
	AgentGID = 1000
)

// ImportImage imports img into the cluster's containerd as ref (a docker archive given to ctr
// images import in the k8s.io namespace, which kubelet's CRI reads). Pods name it with
// imagePullPolicy Never: nothing is ever pulled. An image already imported under ref is not again.
func (c *Cluster) ImportImage(t testing.TB, ref string, img v1.Image) {
	t.Helper()
	if err := c.importImage(ref, img); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) importImage(ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("kubetest: image name %q: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("kubetest: image %s: %w", ref, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.imported[ref] == digest.String() {
		return nil
	}
	f, err := os.CreateTemp("", "kubetest-image-*.tar")
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := tarball.Write(tag, img, f); err != nil {
		return fmt.Errorf("kubetest: writing image %s: %w", ref, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("kubetest: writing image %s: %w", ref, err)
	}
	out, err := exec.Command("ctr", "-n", "k8s.io", "-a", c.Containerd, "images", "import", f.Name()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubetest: ctr images import %s: %v: %s", ref, err, out)
	}
	c.imported[ref] = digest.String()
	return nil
}

// CordonImage builds and imports the cordon image: cordon's static binary at /cordon
// (kubepod.BinaryInImage) and nothing else. It returns the image's name,
// cordon.test/cordon:<digest prefix>.
func CordonImage(t testing.TB, c *Cluster, binary string) string {
	t.Helper()
	img, err := cordonImage(binary)
	if err != nil {
		t.Fatal(err)
	}
	return importNamed(t, c, "cordon.test/cordon", img)
}

func cordonImage(binary string) (v1.Image, error) {
	if err := static(binary); err != nil {
		return nil, err
	}
	return image([]entry{{name: "cordon", mode: 0o755, src: binary}}, v1.Config{Entrypoint: []string{"/cordon"}})
}

// agentImages caches the agent image: it is the same for every test of the process (it is made of
// the machine's own files).
var agentImages struct {
	sync.Mutex
	img v1.Image
}

// AgentImage builds and imports the agent image: busybox (static) as /bin/sh and the other
// applets, the machine's git (with git-remote-http(s) and its templates) and curl with the shared
// libraries they load, an /etc/passwd and /etc/group where uid 1000 is "agent" (the image's user),
// and /tmp. Tests run it with a read-only root file system. It returns the image's name,
// cordon.test/agent:<digest prefix>.
func AgentImage(t testing.TB, c *Cluster) string {
	t.Helper()
	agentImages.Lock()
	img := agentImages.img
	if img == nil {
		var err error
		img, err = agentImage()
		if err != nil {
			agentImages.Unlock()
			t.Fatal(err)
		}
		agentImages.img = img
	}
	agentImages.Unlock()
	return importNamed(t, c, "cordon.test/agent", img)
}

func agentImage() (v1.Image, error) {
	es, err := busybox()
	if err != nil {
		return nil, err
	}
	elves := []string{"/usr/bin/git", "/usr/bin/curl", "/usr/lib/git-core/git", "/usr/lib/git-core/git-remote-http"}
	for _, p := range elves {
		es = append(es, entry{name: p[1:], mode: 0o755, src: p})
	}
	es = append(es, entry{name: "usr/lib/git-core/git-remote-https", link: "git-remote-http"})
	libs, err := sharedLibraries(elves...)
	if err != nil {
		return nil, err
	}
	for _, lib := range libs {
		es = append(es, entry{name: lib[1:], mode: 0o755, src: lib})
	}
	tmpl, err := tree("/usr/share/git-core/templates")
	if err != nil {
		return nil, err
	}
	es = append(es, tmpl...)
	es = append(es,
		entry{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nagent:x:%d:%d:agent:/home/agent:/bin/sh\n", AgentUID, AgentGID))},
		entry{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nagent:x:%d:\n", AgentGID))},
		entry{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
		entry{name: "tmp", dir: true, mode: 0o1777},
		entry{name: "root", dir: true, mode: 0o700},
		entry{name: "home/agent", dir: true, mode: 0o755, uid: AgentUID, gid: AgentGID},
	)
	return image(es, v1.Config{
		Cmd:  []string{"/bin/sh"},
		User: fmt.Sprintf("%d:%d", AgentUID, AgentGID),
		Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
	})
}

// pauseImage is each pod's sandbox container: busybox sleeping. (Kubernetes' pause also reaps
// zombies, which matters only with a shared PID namespace, and exits on SIGTERM; containerd stops a
// sandbox with SIGKILL.)
func pauseImage() (v1.Image, error) {
	if err := static(busyboxPath); err != nil {
		return nil, fmt.Errorf("%w (install busybox-static)", err)
	}
	return image([]entry{{name: "bin/busybox", mode: 0o755, src: busyboxPath}},
		v1.Config{Entrypoint: []string{"/bin/busybox", "sleep", "2147483647"}})
}

// busyboxPath is busybox-static's binary.
const busyboxPath = "/bin/busybox"

// busybox is busybox and a link to it for each of its applets in /bin.
func busybox() ([]entry, error) {
	if err := static(busyboxPath); err != nil {
		return nil, fmt.Errorf("%w (install busybox-static)", err)
	}
	out, err := exec.Command(busyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("kubetest: busybox --list: %w", err)
	}
	es := []entry{{name: "bin/busybox", mode: 0o755, src: busyboxPath}}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" && !strings.Contains(applet, "/") {
			es = append(es, entry{name: "bin/" + applet, link: "busybox"})
		}
	}
	return es, nil
}

// static refuses a dynamically linked binary (it would not run in an image without its libraries).
func static(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("kubetest: %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("kubetest: %s is dynamically linked; the image needs a static binary", p)
		}
	}
	return nil
}

// sharedLibraries are the libraries (and the dynamic loader) that ldd says the binaries load, by
// the paths the loader looks for them at.
func sharedLibraries(bins ...string) ([]string, error) {
	seen := map[string]bool{}
	var libs []string
	for _, b := range bins {
		out, err := exec.Command("ldd", b).Output()
		if err != nil {
			return nil, fmt.Errorf("kubetest: ldd %s: %w", b, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			var p string
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				p = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				p = f[0] // the loader
			case len(f) >= 2 && f[1] == "=>" && (len(f) < 3 || f[2] == "not"):
				return nil, fmt.Errorf("kubetest: %s needs %s, which is not installed", b, f[0])
			}
			if p != "" && !seen[p] {
				seen[p] = true
				libs = append(libs, p)
			}
		}
	}
	slices.Sort(libs)
	return libs, nil
}

// tree is every file, directory and link under dir, at the same paths.
func tree(dir string) ([]entry, error) {
	var es []entry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{name: p[1:], mode: int64(fi.Mode().Perm())}
		switch {
		case d.IsDir():
			e.dir = true
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.link, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			e.src = p
		default:
			return nil
		}
		es = append(es, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	return es, nil
}

// entry is one file of an image's layer: a directory, a link, or a regular file whose content is
// data or the file src on this machine (its links followed).
type entry struct {
	name     string // relative to the image's root
	mode     int64
	uid, gid int
	dir      bool
	link     string
	src      string
	data     []byte
}

// image is a one-layer image of es with cfg, for this machine's architecture. Its layer is
// reproducible (no times, owners as given), so the same files make the same digest.
func image(es []entry, cfg v1.Config) (v1.Image, error) {
	b, err := layerTar(es)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return nil, fmt.Errorf("kubetest: layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("kubetest: image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("kubetest: image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("kubetest: image: %w", err)
	}
	return img, nil
}

// layerTar writes es as a tar, each directory (given or implied) before what it holds.
func layerTar(es []entry) ([]byte, error) {
	byName := map[string]entry{}
	for _, e := range es {
		e.name = path.Clean(e.name)
		byName[e.name] = e
		for d := path.Dir(e.name); d != "."; d = path.Dir(d) {
			if _, ok := byName[d]; !ok {
				byName[d] = entry{name: d, dir: true, mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := byName[n]
		h := &tar.Header{Name: n, Mode: e.mode, Uid: e.uid, Gid: e.gid, Format: tar.FormatPAX}
		var data []byte
		switch {
		case e.dir:
			h.Typeflag, h.Name = tar.TypeDir, n+"/"
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		default:
			h.Typeflag = tar.TypeReg
			data = e.data
			if e.src != "" {
				var err error
				if data, err = os.ReadFile(e.src); err != nil {
					return nil, fmt.Errorf("kubetest: %w", err)
				}
			}
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("kubetest: layer: %w", err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("kubetest: layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("kubetest: layer: %w", err)
	}
	return buf.Bytes(), nil
}

// importNamed imports img as repo:<the first 12 hex digits of its digest> and returns that name.
func importNamed(t testing.TB, c *Cluster, repo string, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatalf("kubetest: image %s: %v", repo, err)
	}
	ref := repo + ":" + d.Hex[:12]
	c.ImportImage(t, ref, img)
	return ref
}
