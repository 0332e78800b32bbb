package budget

import "bytes"

// sseParser splits a server-sent event stream (the WHATWG format: lines ending in LF, CR or CRLF,
// "field: value", a blank line ending an event) as it arrives, split anywhere. The data of an
// event is handed on as it is read, never collected, so no event's size matters; only the field
// name and the event name are held, each bounded.
//
// It works on runs of bytes, not bytes: a line's field name, its value and its end are each found
// with one search, and a data line's value goes on in one call.
type sseParser struct {
	onData  func([]byte) // the next bytes of the current event's data (lines joined by "\n")
	onEvent func(name []byte)

	afterCR  bool   // the last byte was CR: an LF right after it ends nothing more
	inValue  bool   // past the field name's ':'
	skipSP   bool   // the value's single leading space is still to be dropped
	field    []byte // the field name so far (bounded by maxField)
	lineLen  int    // bytes on this line so far
	name     []byte // the event field's value (bounded by maxName)
	hasData  bool   // the current event has a data line
	dataLine bool   // this line is a data line
	evLine   bool   // this line is an event line
}

const (
	maxField = 16
	maxName  = 128
)

// newline joins the lines of an event's data.
var newline = []byte{'\n'}

// Write reads the next bytes of the stream.
func (p *sseParser) Write(b []byte) {
	// nl is the index in b of its next LF (len(b) when there is none), kept across lines so that
	// a stream whose lines end in CR alone is not searched again for each line.
	nl := -1
	for len(b) > 0 {
		if p.afterCR {
			p.afterCR = false
			if b[0] == '\n' {
				b = b[1:]
				nl--
				continue
			}
		}
		if nl < 0 {
			if nl = bytes.IndexByte(b, '\n'); nl < 0 {
				nl = len(b)
			}
		}
		end := nl
		if i := bytes.IndexByte(b[:nl], '\r'); i >= 0 {
			end = i
		}
		if end > 0 {
			p.run(b[:end])
		}
		if end == len(b) {
			return
		}
		p.afterCR = b[end] == '\r'
		p.endLine()
		b = b[end+1:]
		nl -= end + 1
	}
}

// run reads b, a part of a line without its end.
func (p *sseParser) run(b []byte) {
	if !p.inValue {
		k := bytes.IndexByte(b, ':')
		f := b
		if k >= 0 {
			f = b[:k]
		}
		p.lineLen += len(f)
		if len(p.field)+len(f) <= maxField {
			p.field = append(p.field, f...)
		} else {
			p.field = append(p.field[:0], '?') // too long to be a field we read
		}
		if k < 0 {
			return
		}
		p.colon()
		b = b[k+1:]
		if len(b) == 0 {
			return
		}
	}
	if p.skipSP {
		p.skipSP = false
		if b[0] == ' ' {
			p.lineLen++
			if b = b[1:]; len(b) == 0 {
				return
			}
		}
	}
	p.lineLen += len(b)
	switch {
	case p.dataLine:
		p.onData(b)
	case p.evLine:
		if n := min(len(b), maxName-len(p.name)); n > 0 {
			p.name = append(p.name, b[:n]...)
		}
	}
}

// colon ends the field name at its ':'.
func (p *sseParser) colon() {
	p.lineLen++
	p.inValue, p.skipSP = true, true
	switch string(p.field) {
	case "data":
		p.dataLine = true
		if p.hasData {
			p.onData(newline)
		}
		p.hasData = true
	case "event":
		p.evLine = true
		p.name = p.name[:0]
	}
}

// endLine ends a line: a blank one dispatches the event, a field name alone is a field with an
// empty value.
func (p *sseParser) endLine() {
	switch {
	case p.lineLen == 0:
		if p.hasData {
			p.onEvent(p.name)
		}
		p.hasData = false
		p.name = p.name[:0]
	case !p.inValue && string(p.field) == "data":
		if p.hasData {
			p.onData(newline)
		}
		p.hasData = true
	case !p.inValue && string(p.field) == "event":
		p.name = p.name[:0]
	}
	p.inValue, p.skipSP, p.dataLine, p.evLine = false, false, false, false
	p.field = p.field[:0]
	p.lineLen = 0
}
