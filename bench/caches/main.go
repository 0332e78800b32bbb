// Command caches measures what filesystem.caches buys: a second `go build` and an `npm ci` of a real
// small project inside cordon, with the host's caches shown under a layer of the run's own, against
// the same commands outside. The caches are warmed outside first (go's module cache is the host's
// own, which already holds the project's modules; npm's is filled from a registry this program
// serves on loopback), then contenders run interleaved round by round and each ratio is taken within
// a round, so that other load on the machine moves both sides alike.
//
//	CGO_ENABLED=0 go build -o bin/cordon ./cmd/cordon && go run ./bench/caches -cordon bin/cordon -n 15
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

func main() {
	cordon := flag.String("cordon", "bin/cordon", "cordon binary")
	n := flag.Int("n", 15, "rounds")
	npmPackages := flag.Int("npm-packages", 40, "dependencies of the npm project")
	flag.Parse()
	bin, err := filepath.Abs(*cordon)
	if err != nil {
		fail(err)
	}
	base, err := os.MkdirTemp("", "cordon-bench-caches-")
	if err != nil {
		fail(err)
	}
	if os.Getenv("BENCH_KEEP") == "" {
		defer os.RemoveAll(base)
	} else {
		fmt.Println("keeping", base)
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		fail(fmt.Errorf("go env GOMODCACHE: %w", err))
	}
	goProj, npmProj := filepath.Join(base, "goproj"), filepath.Join(base, "npmproj")
	gocache, npmcache := filepath.Join(base, "gocache"), filepath.Join(base, "npmcache")
	env := append(os.Environ(),
		"XDG_STATE_HOME="+filepath.Join(base, "state"),
		"GOMODCACHE="+strings.TrimSpace(string(modcache)), "GOCACHE="+gocache, "GOPROXY=off", "GOFLAGS=-mod=readonly",
		"npm_config_cache="+npmcache, "npm_config_update_notifier=false")
	writeGoProject(goProj)
	registry := serveRegistry(*npmPackages)
	writeNpmProject(npmProj, registry, *npmPackages)
	policy := filepath.Join(base, "policy.yaml")
	write(policy, "version: 1\nfilesystem:\n  caches: [go, npm]\n")

	// Warm the caches outside: the first build compiles every package, npm install downloads and
	// writes the lockfile that npm ci then follows.
	for _, w := range []struct {
		dir  string
		argv []string
	}{
		{goProj, []string{"go", "mod", "tidy"}}, // from the module cache alone (GOPROXY=off)
		{goProj, []string{"go", "build", "."}},
		{npmProj, []string{"npm", "install", "--no-audit", "--no-fund", "--registry", registry}},
	} {
		run(w.dir, env, w.argv)
	}
	addResolved(filepath.Join(npmProj, "package-lock.json"), registry)

	type contender struct {
		name string
		dir  string
		argv []string
		runs []time.Duration
	}
	inside := func(dir string, argv ...string) []string {
		return append([]string{bin, "run", "--policy", policy, "--workspace", dir, "--"}, argv...)
	}
	// The default output (./benchapp, up to date in the project, which the workspace shows): the
	// second build a user runs. Then one to a fresh path, which links every time on both sides.
	goBuild := []string{"go", "build", "."}
	goLink := []string{"sh", "-c", "rm -f /tmp/cordon-bench-out && go build -o /tmp/cordon-bench-out ."}
	npmCI := []string{"npm", "ci", "--offline", "--no-audit", "--no-fund"}
	cs := []*contender{
		{name: "go build (outside)", dir: goProj, argv: goBuild},
		{name: "go build (cordon, caches)", dir: goProj, argv: inside(goProj, goBuild...)},
		{name: "go build -o new (outside)", dir: goProj, argv: goLink},
		{name: "go build -o new (cordon)", dir: goProj, argv: inside(goProj, goLink...)},
		{name: "npm ci (outside)", dir: npmProj, argv: npmCI},
		{name: "npm ci (cordon, caches)", dir: npmProj, argv: inside(npmProj, npmCI...)},
		{name: "cordon run -- true", dir: goProj, argv: inside(goProj, "true")},
	}
	for i := 0; i < *n+1; i++ {
		for _, c := range cs {
			start := time.Now()
			run(c.dir, env, c.argv)
			if i > 0 { // the first round warms what the second build needs inside as well
				c.runs = append(c.runs, time.Since(start))
			}
		}
	}
	fmt.Printf("%-30s %10s %10s %10s\n", "contender", "p10", "median", "p90")
	for _, c := range cs {
		s := append([]time.Duration(nil), c.runs...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		fmt.Printf("%-30s %10s %10s %10s\n", c.name, q(s, 0.1).Round(time.Millisecond), q(s, 0.5).Round(time.Millisecond), q(s, 0.9).Round(time.Millisecond))
	}
	for _, pair := range [][2]int{{1, 0}, {3, 2}, {5, 4}, {6, 0}} {
		num, den := cs[pair[0]], cs[pair[1]]
		ratios := make([]float64, len(num.runs))
		for i := range num.runs {
			ratios[i] = float64(num.runs[i]) / float64(den.runs[i])
		}
		sort.Float64s(ratios)
		fmt.Printf("ratio %-26s / %-25s median %.2fx (p25 %.2fx, p75 %.2fx)\n", num.name, den.name,
			ratios[len(ratios)/2], ratios[len(ratios)/4], ratios[len(ratios)*3/4])
	}
}

// writeGoProject writes a small program that uses two of cordon's own dependencies (so their
// modules are in the host's module cache already, and the build needs no network).
func writeGoProject(dir string) {
	write(filepath.Join(dir, "go.mod"), "module benchapp\n\ngo 1.21\n\nrequire (\n\tgo.yaml.in/yaml/v3 v3.0.6\n\tgolang.org/x/sys v0.50.0\n)\n")
	write(filepath.Join(dir, "go.sum"), "go.yaml.in/yaml/v3 v3.0.6 h1:zcDfvjXEqTQmpjniUBLc91xYJMB2c4QOFxEF/LCEckM=\n"+
		"go.yaml.in/yaml/v3 v3.0.6/go.mod h1:HVTZu1O7/Vkt2N+BFy8Zza+lnLsABggaTM2ZpNIGuKg=\n"+
		"golang.org/x/sys v0.50.0 h1:dkKZEFTEKaLr1sjhs0WiKqoi8Jj5nHbS3Njmx1UoMJs=\n"+
		"golang.org/x/sys v0.50.0/go.mod h1:hNLxWAXmnKAxqDtdwIYC4bM9oQPEecfsnNMuSxOs3og=\n")
	write(filepath.Join(dir, "main.go"), `package main

import (
	"fmt"
	"net/http"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"
)

func main() {
	out, _ := yaml.Marshal(map[string]int{"pid": unix.Getpid()})
	fmt.Print(string(out), http.StatusText(200))
}
`)
}

// serveRegistry serves n packages (dep-0 … dep-N) as an npm registry on loopback and returns its URL.
func serveRegistry(n int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	url := "http://" + ln.Addr().String() + "/"
	routes := map[string][]byte{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("dep-%d", i)
		tgz := tarball(name)
		s1, s512 := sha1.Sum(tgz), sha512.Sum512(tgz)
		doc, _ := json.Marshal(map[string]any{
			"name": name, "dist-tags": map[string]string{"latest": "1.0.0"},
			"versions": map[string]any{"1.0.0": map[string]any{"name": name, "version": "1.0.0", "dist": map[string]string{
				"tarball": url + name + "/-/" + name + "-1.0.0.tgz", "shasum": hex.EncodeToString(s1[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]),
			}}},
		})
		routes["/"+name] = doc
		routes["/"+name+"/-/"+name+"-1.0.0.tgz"] = tgz
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := routes[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		// Cacheable, as a registry's answers are: npm ci --offline then finds them in its cache.
		w.Header().Set("Cache-Control", "public, max-age=3600")
		sum := sha1.Sum(body)
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		if strings.HasSuffix(r.URL.Path, ".tgz") {
			w.Header().Set("Content-Type", "application/octet-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.Write(body)
	}))
	return url
}

func tarball(name string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	files := map[string]string{
		"package/package.json": fmt.Sprintf(`{"name": %q, "version": "1.0.0", "main": "index.js"}`, name),
		"package/index.js":     "module.exports = " + fmt.Sprintf("%q", name) + ";\n" + strings.Repeat("// padding\n", 200),
	}
	for _, f := range []string{"package/package.json", "package/index.js"} {
		tw.WriteHeader(&tar.Header{Name: f, Mode: 0o644, Size: int64(len(files[f]))})
		tw.Write([]byte(files[f]))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func writeNpmProject(dir, registry string, n int) {
	deps := map[string]string{}
	for i := 0; i < n; i++ {
		deps[fmt.Sprintf("dep-%d", i)] = "1.0.0"
	}
	pkg, _ := json.Marshal(map[string]any{"name": "benchapp", "version": "1.0.0", "dependencies": deps})
	write(filepath.Join(dir, "package.json"), string(pkg))
	write(filepath.Join(dir, ".npmrc"), "registry="+registry+"\n")
}

// addResolved writes each package's tarball URL into the lockfile, as a lockfile from a public
// registry has it, so that npm ci fetches only tarballs (found in the cache by their integrity) and
// never a packument.
func addResolved(lock, registry string) {
	data, err := os.ReadFile(lock)
	if err != nil {
		fail(err)
	}
	var l map[string]any
	if err := json.Unmarshal(data, &l); err != nil {
		fail(err)
	}
	pkgs, _ := l["packages"].(map[string]any)
	for key, v := range pkgs {
		name, ok := strings.CutPrefix(key, "node_modules/")
		if p, isMap := v.(map[string]any); ok && isMap {
			p["resolved"] = registry + name + "/-/" + name + "-1.0.0.tgz"
		}
	}
	out, _ := json.MarshalIndent(l, "", "  ")
	write(lock, string(out))
}

func run(dir string, env, argv []string) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		fail(fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out))
	}
}

func write(path, body string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fail(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		fail(err)
	}
}

func q(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[int(p*float64(len(s)-1))]
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/caches:", err)
	os.Exit(1)
}
