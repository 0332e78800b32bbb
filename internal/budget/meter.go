package budget

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"mime"
	"strings"
)

// Meter reads the usage of one answer from its body as it streams to the client: a tee whose
// Write never fails and never changes the bytes. It holds a few kilobytes whatever the answer's
// size. A Meter is not safe for concurrent use; Usage may be called between Writes (a hard budget
// checks the usage so far) and after the body ended.
type Meter struct {
	api API
	sse *sseParser // nil for a JSON answer
	doc scanner    // the JSON answer, or the data of the current event

	// What the answer reported so far.
	usage    Usage
	started  bool // Anthropic: message_start's usage was read
	finished bool // the figures are final (JSON usage, Anthropic message_delta, OpenAI usage)
	invalid  bool // a usage object did not parse: the answer's usage is unknown

	// The current event's data is held (up to maxHold) rather than scanned until it is known
	// to carry a usage figure: most events (text deltas) carry none and are dropped unscanned.
	hold     []byte // the current event's data, not yet scanned
	scanning bool   // the current event's data goes to doc as it comes
	seen     int    // hold[:seen] has no "usage" key still to be judged

	// The start of a run of events not yet given to the parser (writeSSE): the stream's bytes
	// from an event's start, without an LF LF, waiting for the piece that ends the run.
	pend []byte
	key  keySearch

	// parseOnly sends every byte through the parser, skipping nothing: the reference the tests
	// hold the skipping to.
	parseOnly bool
}

// maxHold bounds the data of an event held unscanned; a longer event is scanned.
const maxHold = 4 << 10

// NewMeter meters an answer of api whose Content-Type is contentType: text/event-stream is read as
// server-sent events, anything else as one JSON document. An api of "" (a path APIFor does not
// know) reads nothing: the answer's usage is unknown. The body must be the decoded one: the caller
// asks the API for an identity encoding or decodes before metering.
func NewMeter(api API, contentType string) *Meter {
	m := &Meter{api: api}
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && strings.EqualFold(mt, "text/event-stream") {
		m.sse = &sseParser{onData: m.data, onEvent: m.endEvent}
	}
	return m
}

// Write reads p; it always returns len(p), nil.
func (m *Meter) Write(p []byte) (int, error) {
	if m.api == "" {
		return len(p), nil
	}
	if m.sse != nil {
		m.writeSSE(p)
	} else {
		m.doc.Write(p)
	}
	return len(p), nil
}

// blankLF, two LFs in a row, always ends a blank line (after an LF, a CRLF or a CR followed by LF), and so an event.
var blankLF = []byte("\n\n")

// maxPend bounds the start of a run of events held back from the parser (Meter.pend); a longer one
// goes through the parser.
const maxPend = 4 << 10

// writeSSE reads the next bytes of an event stream. Almost all of a model's stream is text deltas,
// which carry no usage: a run of whole events in which no "usage" key may give a figure (see
// keySearch.live: no data line can then have one either, the data being its lines' values joined
// by LF, and the key holding none) changes nothing and is skipped with a few searches, which run
// at memory speed, instead of being split into lines. A run is skipped from where an event starts
// to an LF LF: whatever line ends come before it (LF, CR, CRLF), that pair ends a blank line, so the
// run ends where an event ends.
//
// The stream reaches the meter in pieces cut anywhere, so a piece's last events are most often
// incomplete: they are held (pend, a few hundred bytes) rather than parsed, and the run they start
// is judged whole once the next piece brings its end. Everything else (an event too long to hold,
// a run with a live key) goes through the parser, which stays the only judge of where events end.
func (m *Meter) writeSSE(p []byte) {
	if m.parseOnly {
		m.sse.Write(p)
		return
	}
	if len(p) == 0 {
		return
	}
	if len(m.pend) > 0 {
		p = m.endRun(p)
	}
	for len(p) > 0 {
		if !m.atEventStart() {
			i := bytes.Index(p, blankLF)
			if i < 0 {
				m.sse.Write(p)
				return
			}
			m.sse.Write(p[:i+2])
			if p = p[i+2:]; !m.atEventStart() {
				m.sse.Write(p)
				return
			}
			continue
		}
		if j := lastBlank(p); j >= 0 {
			if m.key.live(p[:j+2]) {
				m.sse.Write(p[:j+2])
			}
			if p = p[j+2:]; !m.atEventStart() {
				continue
			}
		}
		// p starts an event and holds no LF LF (it follows the last one): the start of the next run,
		// held if it has no CR either, and so no blank line: no event ends in what is held, so
		// nothing is lost should the stream end there, and Usage sees what it would have seen.
		if len(p) > maxPend || bytes.IndexByte(p, '\r') >= 0 {
			m.sse.Write(p)
			return
		}
		if m.pend == nil {
			m.pend = make([]byte, 0, maxPend)
		}
		m.pend = append(m.pend, p...)
		return
	}
}

// endRun reads p after the start of a run held in pend, and returns what follows the run in p
// (nil if p did not end it, and it is still held). What is held has no LF LF and no CR.
func (m *Meter) endRun(p []byte) []byte {
	e := -1
	if m.pend[len(m.pend)-1] == '\n' && p[0] == '\n' {
		e = 1
	} else if i := bytes.Index(p, blankLF); i >= 0 {
		e = i + 2
	}
	switch {
	case e < 0 && len(m.pend)+len(p) <= maxPend && bytes.IndexByte(p, '\r') < 0:
		m.pend = append(m.pend, p...)
		return nil
	case e < 0 || len(m.pend)+e > maxPend:
		// Too long to hold: the parser reads it.
		m.sse.Write(m.pend)
		m.pend = m.pend[:0]
		return p
	}
	m.pend = append(m.pend, p[:e]...)
	if m.key.live(m.pend) {
		m.sse.Write(m.pend)
	}
	m.pend = m.pend[:0]
	return p[e:]
}

// lastBlank is bytes.LastIndex(p, blankLF). The last blank line is near the end of a chunk (an event
// or so back), and a backward scan finds it in a fraction of the time of the rolling hash
// bytes.LastIndex uses for a two-byte separator (a third of the meter's time went there): it steps
// over 8 bytes at a time while none of them is an LF, and tests each byte once otherwise.
func lastBlank(p []byte) int {
	const ones, highs, lfs = 0x0101010101010101, 0x8080808080808080, 0x0a0a0a0a0a0a0a0a
	for i := len(p) - 1; i > 0; {
		if i >= 8 {
			// x has a zero byte where p[i-7:i+1] has an LF; none: no pair ends there.
			if x := binary.LittleEndian.Uint64(p[i-7:]) ^ lfs; (x-ones)&^x&highs == 0 {
				i -= 8
				continue
			}
		}
		switch {
		case p[i] != '\n':
			i--
		case p[i-1] == '\n':
			return i - 1
		default:
			i -= 2 // p[i-1] is not LF, so no pair ends there either
		}
	}
	return -1
}

// keySearch finds the "usage" keys in runs of an event stream. bytes.Index looks for a key's first
// byte and tests each one it finds, and a model's text is full of the key's letters: each
// occurrence costs a call. keySearch instead looks for whichever of the letters u, s, a, g is
// rarest in what the stream has sent lately (counted every reanchor bytes), and falls back to
// bytes.Index when even that one is so common that the calls cost more than a plain search.
// Which letter it looks for changes how fast it is, never what it finds.
type keySearch struct {
	anchor int // the index in usageKey of the byte searched for; 0 until chosen (then 1..4)
	left   int // bytes to search before the anchor is chosen again
}

// reanchor is how many bytes are searched between two choices of the anchor.
const reanchor = 256 << 10

// index is bytes.Index(p, usageKey), searched for the anchor (which must be chosen).
func (k *keySearch) index(p []byte) int {
	const key = keyUsage
	off := k.anchor
	c := key[off]
	end := len(p) - len(key) + off + 1 // an anchor at end or past it starts no key within p
	fails := 0
	for i := off; i < end; i++ {
		j := bytes.IndexByte(p[i:end], c)
		if j < 0 {
			return -1
		}
		i += j
		if s := i - off; string(p[s:s+len(key)]) == key {
			return s
		}
		// As bytes.Index does: past about one false start in 8 bytes, a brute-force search,
		// whose speed does not depend on the bytes, is cheaper.
		if fails++; fails > (i+16)/8 {
			if r := bytes.Index(p[i-off+1:], usageKey); r >= 0 {
				return i - off + 1 + r
			}
			return -1
		}
	}
	return -1
}

// choose sets the anchor to the letter of the key least common in p.
func (k *keySearch) choose(p []byte) {
	k.left = 0 // a short run says little: choose again on the next long one
	if len(p) >= 1<<10 {
		k.left = reanchor
	}
	best := -1
	for off := 1; off <= 4; off++ {
		if n := bytes.Count(p, usageKey[off:off+1]); best < 0 || n < best {
			best, k.anchor = n, off
		}
	}
}

// live reports whether run, a run of whole events from an event's start, may give an event a usage
// figure: it has a "usage" key that is not "usage":null followed by a byte that ends a scalar. As
// for mayHaveUsage, such a null yields at most a null capture, which reads as no usage; OpenAI's
// chat chunks all carry one. The key holds no line end, so each key in an event's data is one in
// run, followed by the same bytes up to its line's end; a line end (CR or LF here) is an LF in the
// data or its end, and either ends the null.
func (k *keySearch) live(run []byte) bool {
	const null = ":null"
	if k.left <= 0 && len(run) >= 1<<10 || k.anchor == 0 {
		k.choose(run)
	}
	k.left -= len(run)
	for {
		i := k.index(run)
		if i < 0 {
			return false
		}
		rest := run[i+len(usageKey):]
		if len(rest) <= len(null) || string(rest[:len(null)]) != null {
			return true
		}
		if c := rest[len(null)]; c != ',' && c != '}' && c != ']' && !isSpace(c) {
			return true
		}
		run = rest[len(null):]
	}
}

// atEventStart reports whether the stream is at the start of a line, between events: nothing of an
// event is held or being scanned.
func (m *Meter) atEventStart() bool {
	s := m.sse
	return !s.afterCR && !s.inValue && s.lineLen == 0 && len(s.field) == 0 && !s.hasData && len(s.name) == 0 &&
		len(m.hold) == 0 && !m.scanning && len(m.pend) == 0
}

// Usage is the usage the answer reported. Known is true only once the figures are final; before
// that (or for an answer that ended early) it has what was read so far.
func (m *Meter) Usage() Usage {
	if m.sse == nil {
		// A JSON answer's usage is its last complete top-level "usage" object, read afresh on
		// each call so that a call mid-answer changes nothing.
		j := Meter{api: m.api}
		if j.api != "" && j.read(m.doc.captures[pathUsage], j.api) {
			j.finished = true
		}
		j.usage.Known = j.finished && !j.invalid
		return j.usage
	}
	u := m.usage
	u.Known = m.finished && !m.invalid
	return u
}

// data reads the next bytes of the current event's data.
func (m *Meter) data(p []byte) {
	switch {
	case m.scanning:
		m.doc.Write(p)
	case len(m.hold)+len(p) > maxHold:
		m.scan()
		m.doc.Write(p)
	default:
		m.hold = append(m.hold, p...)
		if m.mayHaveUsage(false) {
			m.scan()
		}
	}
}

// scan sends the data held to doc, and the rest of the event's data after it.
func (m *Meter) scan() {
	m.scanning = true
	m.doc.Write(m.hold)
	m.hold = m.hold[:0]
}

// endEvent ends the current event, named name: an event whose data was not scanned carries no
// usage and changes nothing.
func (m *Meter) endEvent(name []byte) {
	if !m.scanning && m.mayHaveUsage(true) {
		m.scan()
	}
	if m.scanning {
		m.event(string(name))
	}
	m.hold, m.scanning, m.seen = m.hold[:0], false, 0
}

// keyUsage is the key every usage figure is under, as its bytes are on the wire (the scanner
// matches keys without unescaping them).
const keyUsage = `"usage"`

var usageKey = []byte(keyUsage)

// mayHaveUsage says whether the data held may give event a usage figure; final says it is the
// event's whole data. A usage capture needs a key "usage", so the literal bytes "usage" in quotes
// (a key with escapes is no key the scanner matches), and one that is "usage":null followed by a
// byte that ends a scalar (or by the data's end) yields at most a null capture, which reads as no
// usage. Anything else — another value, a key cut by the end of what is held — says maybe.
func (m *Meter) mayHaveUsage(final bool) bool {
	const null = ":null"
	for {
		// Search for the key without its opening quote, a byte JSON is full of: fewer false starts.
		i := -1
		if m.seen < len(m.hold) {
			i = bytes.Index(m.hold[m.seen+1:], usageKey[1:])
		}
		if i < 0 {
			m.seen = max(m.seen, len(m.hold)-len(usageKey)+1)
			return false
		}
		if m.seen += i; m.hold[m.seen] != '"' {
			m.seen++
			continue
		}
		rest := m.hold[m.seen+len(usageKey):]
		n := min(len(rest), len(null))
		if string(rest[:n]) != null[:n] {
			return true
		}
		if len(rest) == len(null) && final {
			// At the data's end a scalar ends with it: a null capture.
			m.seen += len(usageKey)
			continue
		}
		if len(rest) <= len(null) {
			return final // not yet decided: wait for more, or scan if there is no more
		}
		if c := rest[len(null)]; c != ',' && c != '}' && c != ']' && !isSpace(c) {
			return true
		}
		m.seen += len(usageKey)
	}
}

// event handles one complete server-sent event named name (the data went through m.doc).
func (m *Meter) event(name string) {
	m.doc.end()
	c := m.doc.captures
	typ := name
	if raw, ok := c[pathType]; ok {
		var t string
		if json.Unmarshal(raw, &t) == nil {
			typ = t
		}
	}
	switch m.api {
	case Anthropic:
		switch typ {
		case "message_start":
			if m.read(c[pathMessageUsage], Anthropic) {
				m.started = true
			}
		case "message_delta":
			// Cumulative figures: the last one counts. Only a delta after message_start
			// completes the usage (the input figures come from message_start).
			if m.read(c[pathUsage], Anthropic) && m.started {
				m.finished = true
			}
		}
	case OpenAI:
		// Chat completions: the final chunk's "usage" (null in the others). Responses:
		// response.completed (or .incomplete, .failed) carries response.usage.
		if raw := c[pathResponseUsage]; raw != nil && strings.HasPrefix(typ, "response.") {
			if m.read(raw, OpenAI) {
				m.finished = true
			}
		} else if m.read(c[pathUsage], OpenAI) {
			m.finished = true
		}
	}
	m.doc.reset()
}

// wireUsage is a usage object of either API; the pointers tell a missing figure from a zero.
type wireUsage struct {
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
	CacheRead        *int64 `json:"cache_read_input_tokens"`
	CacheCreation    *int64 `json:"cache_creation_input_tokens"`
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	PromptDetails    *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// read sets m.usage from the usage object raw (nil or JSON null: no usage here) and says whether
// it carried the figures a final usage needs. A usage object that is present but wrong (not an
// object, a negative figure) makes the answer's usage unknown rather than zero.
func (m *Meter) read(raw []byte, api API) bool {
	if raw == nil || string(raw) == "null" {
		return false
	}
	var w wireUsage
	if err := json.Unmarshal(raw, &w); err != nil {
		m.invalid = true
		return false
	}
	for _, p := range []*int64{w.InputTokens, w.OutputTokens, w.CacheRead, w.CacheCreation, w.PromptTokens, w.CompletionTokens} {
		if p != nil && *p < 0 {
			m.invalid = true
			return false
		}
	}
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	switch api {
	case Anthropic:
		// input_tokens excludes the cache; message_delta may carry only output_tokens.
		if w.InputTokens != nil {
			m.usage.Input = *w.InputTokens
		}
		if w.CacheRead != nil {
			m.usage.CacheRead = *w.CacheRead
		}
		if w.CacheCreation != nil {
			m.usage.CacheWrite = *w.CacheCreation
		}
		if w.OutputTokens != nil {
			m.usage.Output = *w.OutputTokens
		}
		return w.OutputTokens != nil && (w.InputTokens != nil || m.started)
	case OpenAI:
		in, out, cached := w.PromptTokens, w.CompletionTokens, w.PromptDetails
		if in == nil && out == nil { // Responses API
			in, out, cached = w.InputTokens, w.OutputTokens, w.InputDetails
		}
		if in == nil || out == nil {
			return false
		}
		var c int64
		if cached != nil {
			c = val(cached.CachedTokens)
		}
		if c < 0 || c > *in {
			m.invalid = true
			return false
		}
		m.usage = Usage{Input: *in - c, CacheRead: c, Output: *out}
		return true
	}
	return false
}
