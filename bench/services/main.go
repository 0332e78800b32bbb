//go:build linux

// Command services measures the time to a ready PostgreSQL seeded with a 1 MB fixture, as a run's
// fixture service (internal/services): the first start of a server version (initdb into the template
// store) and a warm one (an overlay on the template, mounted by cordon as root and by the server's
// helper in its own namespace otherwise), against a floor that does the least by hand (copy
// of the same template, postgres started without namespaces, psql -f the fixture), and, with
// -cordon, `cordon run` of `true` with and without the service; with -mysql, a warm MariaDB start
// seeded with the same fixture (its ratio to PostgreSQL's warm start). Contenders are interleaved round by
// round and ratios taken within a round, so load from other jobs moves them together.
//
//	CGO_ENABLED=0 go build -o bin/cordon ./cmd/cordon && go run ./bench/services -n 15 -cordon bin/cordon [-mysql]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cordon-sandbox/cordon/internal/services"
)

func main() {
	if len(os.Args) > 0 && os.Args[0] == services.MountArg0 {
		os.Exit(services.MountMain()) // services.Start re-executes this binary as the overlay helper
	}
	n := flag.Int("n", 15, "rounds")
	cordonBin := flag.String("cordon", "", "cordon binary, to time `cordon run -- true` with and without the service")
	withMysql := flag.Bool("mysql", false, "also time a warm MariaDB (mysql kind) seeded with the same fixture")
	flag.Parse()
	root, err := os.MkdirTemp("", "cordon-bench-svc-")
	check(err)
	defer os.RemoveAll(root)
	check(os.Chmod(root, 0o711))
	project := filepath.Join(root, "p")
	check(os.MkdirAll(filepath.Join(project, "db"), 0o755))
	check(os.WriteFile(filepath.Join(project, "db", "seed.sql"), fixture(1<<20), 0o644))
	ids := services.IDs{}
	if os.Getuid() == 0 {
		ids = services.IDs{UID: 2000065000, GID: 2000065000, Switch: true}
	}
	opts := func(run, templates string) services.Options {
		return services.Options{Runtime: filepath.Join(root, "rt"), Templates: templates, RunID: run, Project: project,
			Path: os.Getenv("PATH"), IDs: ids}
	}
	spec := []services.Spec{{Name: "db", Kind: "postgres", Fixtures: []string{"db/seed.sql"}, Database: "app", User: "app", Where: "bench"}}
	warmTemplates := filepath.Join(root, "tmpl")
	var seeding []time.Duration // the fixture's own share of warm starts
	mysqlSpec := []services.Spec{{Name: "db", Kind: "mysql", Fixtures: []string{"db/seed.sql"}, Database: "app", User: "app", Where: "bench"}}
	startSpec := func(run, templates string, spec []services.Spec) time.Duration {
		o := opts(run, templates)
		o.Event = func(e services.Event) {
			if e.Action == "fixture" && templates == warmTemplates && e.Kind == "postgres" {
				seeding = append(seeding, e.Duration)
			}
		}
		t0 := time.Now()
		set, err := services.Start(context.Background(), o, spec)
		d := time.Since(t0)
		check(err)
		check(set.Stop())
		return d
	}
	start := func(run, templates string) time.Duration { return startSpec(run, templates, spec) }
	start("prime", warmTemplates) // the warm template exists before round 1
	bins, err := services.Find("postgres", os.Getenv("PATH"))
	check(err)
	tmpls, _ := filepath.Glob(filepath.Join(warmTemplates, "postgres*-app-app"))
	if len(tmpls) != 1 {
		fail(fmt.Errorf("want one template in %s, found %v", warmTemplates, tmpls))
	}

	var policy string
	if *cordonBin != "" {
		policy = filepath.Join(root, "policy.yaml")
		check(os.WriteFile(policy, []byte("version: 1\nservices:\n  db:\n    postgres: {fixtures: [db/seed.sql]}\n    env: DATABASE_URL\n"), 0o644))
		cordonRun(*cordonBin, project, policy, root) // its template, too, exists before round 1
	}
	names := []string{"floor: cp template + postgres + psql -f", "services.Start, warm", "services.Start, first (initdb)"}
	if policy != "" {
		names = append(names, "cordon run -- true", "cordon run (db service) -- true")
	}
	mysqlAt := -1
	if *withMysql {
		startSpec("prime-mysql", warmTemplates, mysqlSpec)
		mysqlAt, names = len(names), append(names, "services.Start mysql (MariaDB), warm")
	}
	times := make([][]time.Duration, len(names))
	for i := range *n {
		times[0] = append(times[0], floor(root, tmpls[0], bins, project, ids))
		times[1] = append(times[1], start(fmt.Sprintf("warm%d", i), warmTemplates))
		times[2] = append(times[2], start(fmt.Sprintf("first%d", i), filepath.Join(root, fmt.Sprintf("tmpl%d", i))))
		if policy != "" {
			times[3] = append(times[3], cordonRun(*cordonBin, project, "", root))
			times[4] = append(times[4], cordonRun(*cordonBin, project, policy, root))
		}
		if mysqlAt >= 0 {
			times[mysqlAt] = append(times[mysqlAt], startSpec(fmt.Sprintf("mysql%d", i), warmTemplates, mysqlSpec))
		}
	}
	fmt.Printf("PostgreSQL %s, a %d-byte fixture, %d rounds; psql -f of the fixture in warm starts: median %.1f ms\n",
		bins.Version, 1<<20, *n, ms(median(seeding)))
	for i, name := range names {
		fmt.Printf("%-44s median %7.1f ms  p25–p75 %7.1f–%7.1f ms", name, ms(median(times[i])), ms(pct(times[i], 25)), ms(pct(times[i], 75)))
		if i == mysqlAt {
			fmt.Printf("  / postgres warm %.2fx", ratio(times[i], times[1]))
		} else if i > 0 && i < 3 {
			fmt.Printf("  / floor %.2fx", ratio(times[i], times[0]))
		}
		if i == 4 {
			fmt.Printf("  / without %.2fx (+%.0f ms)", ratio(times[4], times[3]), ms(median(times[4])-median(times[3])))
		}
		fmt.Println()
	}
}

// fixture is an SQL script of about size bytes: a table and multi-row inserts.
func fixture(size int) []byte {
	var b strings.Builder
	b.WriteString("CREATE TABLE items (id int PRIMARY KEY, name text, note text);\n")
	for id := 1; b.Len() < size; {
		b.WriteString("INSERT INTO items VALUES ")
		for j := 0; j < 100; j, id = j+1, id+1 {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "(%d,'item-%d','a note of some length for row %d')", id, id, id)
		}
		b.WriteString(";\n")
	}
	return []byte(b.String())
}

// floor starts the same template by hand: the least a script could do, without namespaces.
func floor(root, tmpl string, bins services.Binaries, project string, ids services.IDs) time.Duration {
	dir, err := os.MkdirTemp(filepath.Join(root, "rt"), "floor-")
	check(err)
	defer os.RemoveAll(dir)
	cred := func(cmd *exec.Cmd) *exec.Cmd {
		if ids.Switch {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(ids.UID), Gid: uint32(ids.GID)}}
		}
		return cmd
	}
	pw, err := os.ReadFile(tmpl + ".password")
	check(err)
	t0 := time.Now()
	check(exec.Command("cp", "-a", "--reflink=auto", tmpl, filepath.Join(dir, "data")).Run())
	if ids.Switch {
		check(os.Chown(dir, ids.UID, ids.GID))
	}
	pg := cred(exec.Command(bins.Path("postgres"), "-D", filepath.Join(dir, "data"), "-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"))
	check(pg.Start())
	defer func() { pg.Process.Signal(syscall.SIGQUIT); pg.Wait() }()
	for !ready(filepath.Join(dir, "data", "postmaster.pid")) {
		time.Sleep(2 * time.Millisecond)
	}
	in, err := os.Open(filepath.Join(project, "db", "seed.sql"))
	check(err)
	defer in.Close()
	// As the template's superuser: the floor sets no per-run password and drops no privilege.
	psql := cred(exec.Command(bins.Path("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", dir, "-U", "cordon", "-d", "app", "-f", "-"))
	psql.Stdin = in
	psql.Env = []string{"PGPASSWORD=" + strings.TrimSpace(string(pw))}
	out, err := psql.CombinedOutput()
	if err != nil {
		fail(fmt.Errorf("floor psql: %v: %s", err, out))
	}
	return time.Since(t0)
}

func ready(pidFile string) bool {
	b, err := os.ReadFile(pidFile)
	lines := strings.Split(string(b), "\n")
	return err == nil && len(lines) > 7 && strings.TrimSpace(lines[7]) == "ready"
}

// cordonRun times `cordon run [--policy p] -- true` in project with its own state below root.
func cordonRun(bin, project, policy, root string) time.Duration {
	args := []string{"run", "--workspace", project}
	if policy != "" {
		args = append(args, "--policy", policy)
	}
	cmd := exec.Command(bin, append(args, "--", "true")...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(root, "state"))
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		fail(fmt.Errorf("cordon run: %v: %s", err, out))
	}
	return time.Since(t0)
}

func median(d []time.Duration) time.Duration { return pct(d, 50) }

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

// ratio is the median of per-round ratios a/b.
func ratio(a, b []time.Duration) float64 {
	r := make([]time.Duration, len(a))
	for i := range a {
		r[i] = time.Duration(float64(a[i]) / float64(b[i]) * 1e6)
	}
	return float64(median(r)) / 1e6
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func check(err error) {
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/services:", err)
	os.Exit(1)
}
