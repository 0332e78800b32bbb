package sshagent

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"os"
	"strconv"
	"strings"
)

// Host is a name and port the sandbox may reach, for KnownHosts.
type Host struct {
	Name string
	Port uint16
}

// KnownHosts returns the lines of the given known_hosts files (the caller's ~/.ssh/known_hosts and
// the system's) that name one of hosts, plain or hashed, so that ssh inside checks host keys strictly
// for the hosts it may reach, and learns nothing of the others the caller knows. Missing files are
// skipped; @revoked and @cert-authority lines are kept as the lines they annotate are.
func KnownHosts(files []string, hosts []Host) []byte {
	want := map[string]bool{}
	for _, h := range hosts {
		want[hostKey(h)] = true
	}
	var out bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" || line[0] == '#' {
				continue
			}
			fields := strings.Fields(line)
			patterns := fields[0]
			if strings.HasPrefix(patterns, "@") && len(fields) > 1 {
				patterns = fields[1]
			}
			if names(patterns, want) {
				out.WriteString(line)
				out.WriteByte('\n')
			}
		}
	}
	return out.Bytes()
}

// hostKey is how known_hosts names h: the name alone on port 22, else "[name]:port".
func hostKey(h Host) string {
	name := strings.ToLower(strings.TrimSuffix(h.Name, "."))
	if h.Port == 22 || h.Port == 0 {
		return name
	}
	return "[" + name + "]:" + strconv.Itoa(int(h.Port))
}

// names reports whether a line's comma-separated patterns name one of want exactly (plain or
// hashed) and negate none of them. Wildcard patterns are not expanded: a line for "*.corp" would
// show the sandbox every host the caller trusts under it.
func names(patterns string, want map[string]bool) bool {
	hit := false
	for _, p := range strings.Split(patterns, ",") {
		negated := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		var match bool
		if rest, ok := strings.CutPrefix(p, "|1|"); ok {
			match = hashedMatch(rest, want)
		} else {
			match = want[strings.ToLower(p)]
		}
		if match && negated {
			return false
		}
		hit = hit || match
	}
	return hit
}

// hashedMatch reports whether "salt|hash" (base64, HMAC-SHA1 of the name keyed by the salt, as
// HashKnownHosts writes) is one of want.
func hashedMatch(s string, want map[string]bool) bool {
	salt64, hash64, ok := strings.Cut(s, "|")
	if !ok {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(salt64)
	hash, err2 := base64.StdEncoding.DecodeString(hash64)
	if err1 != nil || err2 != nil {
		return false
	}
	for name := range want {
		m := hmac.New(sha1.New, salt)
		m.Write([]byte(name))
		if hmac.Equal(m.Sum(nil), hash) {
			return true
		}
	}
	return false
}
