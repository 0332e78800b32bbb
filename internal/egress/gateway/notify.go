package gateway

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/cordon-sandbox/cordon/internal/egress"
)

// maxNotices bounds the refusal lines one run prints on the user's terminal; the audit log has every
// refusal.
const maxNotices = 32

// notifier prints a refusal line the first time its key is seen, and at most maxNotices lines in a
// run, then one line saying the rest are only in the audit log: an agent retrying a request, walking
// paths, scanning hosts or tunnelling data through DNS names must not flood the terminal, nor push
// the first, telling refusals off the screen.
type notifier struct {
	out func(string)

	mu      sync.Mutex
	seen    map[string]bool
	printed int
}

func newNotifier(out func(string)) *notifier {
	return &notifier{out: out, seen: map[string]bool{}}
}

// notify prints line unless key was seen or the run's lines are used up. A nil notifier prints
// nothing.
func (n *notifier) notify(key, line string) { n.notifyf(key, func() string { return line }) }

// notifyf is notify with the line made only when it is printed: a refusal seen before (a DNS
// tunnel's thousandth name) costs a map lookup, not a policy match and a format.
func (n *notifier) notifyf(key string, line func() string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	if n.seen[key] || n.printed > maxNotices {
		n.mu.Unlock()
		return
	}
	n.seen[key] = true
	n.printed++
	last := n.printed > maxNotices
	n.mu.Unlock()
	if last {
		n.out("further refusals are not printed; cordon log --denied RUN lists them all")
		return
	}
	n.out(line())
}

// refusedConn tells the human that a connection to name and port was refused, once per host and
// port. The proxy calls it on every refusal (proxy.Config.Notify); this notifier is the one place
// that de-duplicates, and the line is made only when it is printed.
func (n *notifier) refusedConn(d egress.Decision, name string, port uint16) {
	n.notifyf("tcp "+name+":"+strconv.Itoa(int(port)), func() string {
		line := fmt.Sprintf("blocked %s:%d (%s)", name, port, d.Reason)
		if d.Fix != "" {
			line += " — to allow: " + d.Fix
		}
		return line
	})
}

// unreachable tells the human that an allowed name and port could not be reached, once per host
// and port (the key the interceptor uses for the same upstream, so that one host gets one line).
func (n *notifier) unreachable(name string, port uint16, err error) {
	up := net.JoinHostPort(name, strconv.Itoa(int(port)))
	n.notifyf("upstream "+up, func() string {
		return fmt.Sprintf("cannot reach %s (%v); the sandbox's connections to it fail", up, err)
	})
}

// dnsKey groups a refused name with the other names under the same parent domain (the last two
// labels, three under a short second-level label such as co.uk): a DNS tunnel asks for many names
// under one domain, and one line tells the user about all of them.
func dnsKey(name string) string {
	labels := strings.Split(name, ".")
	n := 2
	if len(labels) >= 3 && len(labels[len(labels)-2]) <= 3 && len(labels[len(labels)-1]) == 2 {
		n = 3
	}
	if len(labels) > n {
		labels = labels[len(labels)-n:]
	}
	return "dns " + strings.Join(labels, ".")
}
