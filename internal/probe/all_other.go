//go:build !linux

package probe

// All returns every probe for this platform: the probes attack a Linux sandbox's boundaries (its
// namespaces, seccomp filter, mounts, netlink), so there are none here yet.
func All() []Probe { return nil }

// AllocMain is the res.memory child's main, which only Linux's probes start.
func AllocMain([]string) int { return 2 }

// FilesMain is res.open-files' child's main, which only Linux's probes start.
func FilesMain([]string) int { return 2 }

// EtcSecretPaths are the /etc paths fs.etc-secrets looks for, which only Linux's probes have.
func EtcSecretPaths() []string { return nil }
