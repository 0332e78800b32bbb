package budget

// sseParser splits a server-sent event stream (the WHATWG format: lines ending in LF, CR or CRLF,
// "field: value", a blank line ending an event) as it arrives, split anywhere. The data of an
// event is handed on as it is read, never collected, so no event's size matters; only the field
// name and the event name are held, each bounded.
type sseParser struct {
	onData  func([]byte) // the next bytes of the current event's data (lines joined by "\n")
	onEvent func(name string)

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

// Write reads the next bytes of the stream.
func (p *sseParser) Write(b []byte) {
	for len(b) > 0 {
		c := b[0]
		if p.afterCR {
			p.afterCR = false
			if c == '\n' {
				b = b[1:]
				continue
			}
		}
		if c == '\n' || c == '\r' {
			p.afterCR = c == '\r'
			p.endLine()
			b = b[1:]
			continue
		}
		if p.inValue && p.dataLine {
			// Hand on the run of data bytes up to the line's end in one call.
			i := 0
			if p.skipSP {
				p.skipSP = false
				if c == ' ' {
					b = b[1:]
					continue
				}
			}
			for i < len(b) && b[i] != '\n' && b[i] != '\r' {
				i++
			}
			p.onData(b[:i])
			p.lineLen += i
			b = b[i:]
			continue
		}
		p.lineByte(c)
		b = b[1:]
	}
}

func (p *sseParser) lineByte(c byte) {
	p.lineLen++
	if !p.inValue {
		if c == ':' {
			p.inValue, p.skipSP = true, true
			switch string(p.field) {
			case "data":
				p.dataLine = true
				if p.hasData {
					p.onData([]byte{'\n'})
				}
				p.hasData = true
			case "event":
				p.evLine = true
				p.name = p.name[:0]
			}
			return
		}
		if len(p.field) < maxField {
			p.field = append(p.field, c)
		} else {
			p.field = append(p.field[:0], '?') // too long to be a field we read
		}
		return
	}
	if p.skipSP {
		p.skipSP = false
		if c == ' ' {
			return
		}
	}
	if p.evLine && len(p.name) < maxName {
		p.name = append(p.name, c)
	}
}

// endLine ends a line: a blank one dispatches the event, a field name alone is a field with an
// empty value.
func (p *sseParser) endLine() {
	switch {
	case p.lineLen == 0:
		if p.hasData {
			p.onEvent(string(p.name))
		}
		p.hasData = false
		p.name = p.name[:0]
	case !p.inValue && string(p.field) == "data":
		if p.hasData {
			p.onData([]byte{'\n'})
		}
		p.hasData = true
	case !p.inValue && string(p.field) == "event":
		p.name = p.name[:0]
	}
	p.inValue, p.skipSP, p.dataLine, p.evLine = false, false, false, false
	p.field = p.field[:0]
	p.lineLen = 0
}
