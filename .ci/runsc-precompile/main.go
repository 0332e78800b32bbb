// Command runsc-precompile fills in the Go file that holds runsc's precompiled seccomp programs (what
// gVisor's Bazel build generates as filter_precompiled.go with its precompiled_seccomp_rules rule,
// from the same PrecompiledPrograms functions), rewriting the module's own stub of that file, so that a runsc built with
// the go command loads its Sentry's and gofer's filters instead of building them at every start
// ("No precompiled program found ... building seccomp program from scratch"). .ci/build-runsc.sh
// copies it into a copy of gVisor's module and runs it there; it is not part of cordon (the go
// command's ./... patterns skip this directory).
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

func main() {
	which := flag.String("programs", "", "boot (the Sentry's filters) or gofer (the gofer's)")
	out := flag.String("out", "", "the Go file to write")
	flag.Parse()
	load := map[string]func() ([]precompiledseccomp.Program, error){
		"boot":  bootconfig.PrecompiledPrograms,
		"gofer": goferconfig.PrecompiledPrograms,
	}[*which]
	if load == nil || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: runsc-precompile -programs boot|gofer -out FILE")
		os.Exit(2)
	}
	programs, err := load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "precompiling the %s programs: %v\n", *which, err)
		os.Exit(1)
	}
	sort.Slice(programs, func(i, j int) bool { return programs[i].Name < programs[j].Name })
	var reg strings.Builder
	for i, p := range programs {
		if i > 0 && programs[i-1].Name == p.Name {
			fmt.Fprintf(os.Stderr, "duplicate program name %q\n", p.Name)
			os.Exit(1)
		}
		reg.WriteString(p.Registration("\t", "precompiledseccomp", "programs"))
	}
	// The file to write is the module's own stub (precompilation disabled, no programs): it is
	// turned on and given the registrations, so that everything else in it stays gVisor's.
	stub, err := os.ReadFile(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	src, err := enable(string(stub), reg.String())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v (the generator needs updating for this gVisor)\n", *out, err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, []byte(src), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d precompiled seccomp programs\n", *out, len(programs))
}

// The stub's lines that enable rewrites: the build-time switch, and the end of registerPrograms,
// before which the registrations go.
const (
	disabledLine = "const PrecompilationDisabledAtBuildTime = true\n"
	registerEnd  = "\tprecompiledPrograms = programs\n"
)

// enable turns the module's stub filter_precompiled.go into one that registers the programs whose
// registration code is reg. Each line it rewrites must be there exactly once.
func enable(stub, reg string) (string, error) {
	for _, line := range []string{disabledLine, registerEnd} {
		if n := strings.Count(stub, line); n != 1 {
			return "", fmt.Errorf("the stub has %d lines %q, want 1", n, strings.TrimSpace(line))
		}
	}
	src := strings.Replace(stub, disabledLine, "const PrecompilationDisabledAtBuildTime = false\n", 1)
	return strings.Replace(src, registerEnd, reg+registerEnd, 1), nil
}
