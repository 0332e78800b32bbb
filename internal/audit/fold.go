package audit

import (
	"maps"
	"strings"
	"time"
)

// Folding keeps the log readable and small while the agent repeats itself. A decision seen for the
// first time is written at once, as its own event; repeats of it within foldWindow are counted into
// one event, written when the window ends, with the count, the first and last time and a sample of
// the names. "The same decision" is the same kind, decision, rule, reason, port and DNS query type,
// and for a refusal a name under the same domain: a DNS tunnel's names (<data>.evil.test) all differ
// but share their domain, so its stream folds into one event a second. An agent that spreads its
// refusals over many domains gets maxGroups of them a minute apart per rule, and the rest fold by the
// rule alone (Group "*").
//
// What folds: every refusal, and allowed DNS answers for the same name (a resolver asking again).
// What never folds: allowed connections and requests, which carry bytes, credentials and what the
// agent actually reached, and any event with a credential detail (a key that starts with
// "credential"); the log's byte cap bounds those.
const (
	// foldWindow is how long repeats are counted before their event is written.
	foldWindow = time.Second
	// groupWindow and maxGroups: a rule's refusals keep their own domains apart for at most
	// maxGroups domains per groupWindow.
	groupWindow = time.Minute
	maxGroups   = 32
	// maxFolds bounds the folds held at once; past it events are written as they come.
	maxFolds = 4096
	// maxNames is how many distinct names an event keeps as a sample.
	maxNames = 4
)

// anyName is the Group of an event that folded refusals of one rule whatever their names.
const anyName = "*"

// ruleKey is a decision without its name, port and query type.
type ruleKey struct {
	kind         Kind
	decision     Decision
	rule, reason string
}

// foldKey is what makes two decisions "the same". It holds only strings the events already hold,
// so looking one up allocates nothing.
type foldKey struct {
	ruleKey
	group, qtype string
	port         uint16
}

// fold counts the repeats of one decision in the current window.
type fold struct {
	started time.Time // on the Log's clock
	n       int       // repeats counted since started; ev is valid when n > 0
	ev      Event     // the first repeat, with the sums and the sample
	names   [maxNames]string
	nn      int
	varied  bool // the repeats named different hosts
	coarse  bool // folds by rule alone: the key's group is anyName
}

// groups counts the domains a rule has had folds for in the current groupWindow.
type groups struct {
	started time.Time
	n       int
}

// folder holds the folds. It is not safe for concurrent use: the Log's mutex guards it.
type folder struct {
	folds  map[foldKey]*fold
	groups map[ruleKey]*groups
}

func newFolder() folder {
	return folder{folds: map[foldKey]*fold{}, groups: map[ruleKey]*groups{}}
}

// foldable says whether e may be folded, and under which key.
func foldable(e *Event) (foldKey, bool) {
	for k := range e.Detail {
		if strings.HasPrefix(k, "credential") { // used, misused, echoed, sent in clear: each is reviewed
			return foldKey{}, false
		}
	}
	k := foldKey{ruleKey: ruleKey{e.Kind, e.Decision, e.Rule, e.Reason}, qtype: e.Detail["qtype"], port: e.Port}
	switch {
	case e.Decision == Deny:
		k.group = Domain(e.Name)
	case e.Decision == Allow && e.Kind == KindDNS:
		k.group = e.Name
	default:
		return foldKey{}, false
	}
	return k, true
}

// add counts e into the folds and says whether it was folded; an event that was not is to be
// written as it is. Folds whose window is over are passed to emit first (a repeat after its window
// starts the next one).
func (fo *folder) add(e *Event, now time.Time, emit func(Event)) bool {
	k, ok := foldable(e)
	if !ok {
		return false
	}
	f := fo.folds[k]
	if f == nil {
		g := fo.groups[k.ruleKey]
		if g != nil && now.Sub(g.started) >= groupWindow {
			g.started, g.n = now, 0
		}
		if g != nil && g.n >= maxGroups {
			// Too many domains for this rule: fold by the rule alone.
			k = foldKey{ruleKey: k.ruleKey, group: anyName}
			if f = fo.folds[k]; f == nil {
				if len(fo.folds) >= maxFolds {
					return false
				}
				f = &fold{started: now, coarse: true}
				fo.folds[k] = f
			}
			f.count(e)
			return true
		}
		if len(fo.folds) >= maxFolds || len(fo.groups) >= maxFolds && g == nil {
			return false
		}
		if g == nil {
			g = &groups{started: now}
			fo.groups[k.ruleKey] = g
		}
		g.n++
		fo.folds[k] = &fold{started: now}
		return false // the first of its kind is written at once
	}
	if now.Sub(f.started) >= foldWindow {
		first := f.n == 0
		if !first {
			emit(f.event())
		}
		f.n, f.started = 0, now
		if first && !f.coarse {
			return false // the first after a quiet window is written at once
		}
	}
	f.count(e)
	return true
}

// count adds e to the fold.
func (f *fold) count(e *Event) {
	if f.n == 0 {
		f.ev = *e
		f.ev.Detail = maps.Clone(e.Detail) // the caller's map is not ours to keep
		f.ev.Last = e.Time
		f.names[0], f.nn, f.varied = e.Name, 1, f.coarse
		f.n = 1
		return
	}
	f.n++
	if e.Time.After(f.ev.Last) {
		f.ev.Last = e.Time
	}
	f.ev.BytesIn += e.BytesIn
	f.ev.BytesOut += e.BytesOut
	if e.Name == f.ev.Name {
		return
	}
	f.varied = true
	if f.nn < maxNames {
		for _, n := range f.names[:f.nn] {
			if n == e.Name {
				return
			}
		}
		f.names[f.nn] = e.Name
		f.nn++
	}
}

// event is the fold's event: the first repeat with the count, the sums and the sample.
func (f *fold) event() Event {
	e := f.ev
	e.Count = f.n
	if f.varied {
		e.Group = anyName
		if !f.coarse {
			e.Group = Domain(e.Name)
		}
		e.Names = append([]string(nil), f.names[:f.nn]...)
	}
	return e
}

// expire passes to emit the folds whose window is over and forgets those that stayed quiet for a
// whole window, and the domain counts of rules whose groupWindow is over. all expires every fold
// with repeats, for the end of the log.
func (fo *folder) expire(now time.Time, all bool, emit func(Event)) {
	for k, f := range fo.folds {
		if !all && now.Sub(f.started) < foldWindow {
			continue
		}
		if f.n > 0 {
			emit(f.event())
			f.n, f.started = 0, now
			f.ev = Event{}
			continue
		}
		delete(fo.folds, k)
	}
	for k, g := range fo.groups {
		if now.Sub(g.started) >= groupWindow {
			delete(fo.groups, k)
		}
	}
}

// Domain is the domain a refused name is grouped under: its last two labels, or three under a short
// second-level label such as co.uk ("a.b.evil.test" is under "evil.test", "x.shop.co.uk" under
// "shop.co.uk"). It is a heuristic, not the public suffix list: it only decides what folds together.
// A name of one or two labels is its own domain.
func Domain(name string) string {
	name = strings.TrimSuffix(name, ".")
	last := strings.LastIndexByte(name, '.')
	if last < 0 {
		return name
	}
	second := strings.LastIndexByte(name[:last], '.')
	if second < 0 {
		return name
	}
	if last-second-1 <= 3 && len(name)-last-1 == 2 { // co.uk, com.au: one more label
		if third := strings.LastIndexByte(name[:second], '.'); third >= 0 {
			return name[third+1:]
		}
		return name
	}
	return name[second+1:]
}
