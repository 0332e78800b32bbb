package budget

import "bytes"

// scanner reads a JSON document byte by byte, as it arrives, and keeps only the few values usage
// lives in: the top-level "type" string and the "usage" objects at the top level and under the
// top-level "message" (Anthropic's message_start) and "response" (OpenAI's response.completed).
// Everything else — the prompt echo, the answer's text — passes through without being stored, so
// memory is bounded however big the document, and a document split anywhere reads the same.
//
// It is a tokenizer, not a validator: a malformed document yields whatever captures it happened to
// complete, and json.Unmarshal of those captures decides whether they mean anything.
type scanner struct {
	depth     int
	container [trackDepth + 1]byte   // '{' or '[' for depths 1..trackDepth
	keys      [trackDepth + 1]string // the current key of the object at each depth
	expectKey bool                   // the next string at this depth is an object key
	broken    bool                   // more closes than opens: ignore the rest

	inStr, esc bool
	strIsKey   bool
	str        []byte // the key being read (bounded by maxKey)
	strLong    bool   // the key outgrew maxKey: it matches nothing
	key        string // the last complete key, waiting for its ':'
	haveKey    bool

	pending   string // a target path whose value starts at the next non-space byte
	capturing string // the target path being captured
	capDepth  int    // the depth the captured value started at
	capKind   byte   // '{', '[', '"' or 0 for a scalar
	capBuf    []byte
	capLong   bool

	captures map[string][]byte // target path → its last complete value
}

const (
	trackDepth = 2       // keys matter only this deep
	maxKey     = 64      // no key we look for is longer
	maxCapture = 1 << 16 // a usage object is a few hundred bytes
)

// Target paths.
const (
	pathType          = "type"
	pathUsage         = "usage"
	pathMessageUsage  = "message.usage"
	pathResponseUsage = "response.usage"
)

// target is the path a key at depth d names, or "" when it is not one we keep.
func (s *scanner) target(d int, key string) string {
	switch {
	case d == 1 && key == "type":
		return pathType
	case d == 1 && key == "usage":
		return pathUsage
	case d == 2 && key == "usage" && s.keys[1] == "message":
		return pathMessageUsage
	case d == 2 && key == "usage" && s.keys[1] == "response":
		return pathResponseUsage
	}
	return ""
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Write feeds the next bytes of the document.
func (s *scanner) Write(p []byte) {
	for len(p) > 0 {
		if s.broken {
			return
		}
		if s.inStr && !s.esc && !s.strIsKey && s.capturing == "" {
			// The bulk of an answer is text in strings nobody keeps: skip to its end.
			i := bytes.IndexAny(p, `"\`)
			if i < 0 {
				return
			}
			p = p[i:]
		}
		s.byte(p[0])
		p = p[1:]
	}
}

func (s *scanner) byte(c byte) {
	if s.pending != "" && !s.inStr && !isSpace(c) {
		s.capturing, s.pending = s.pending, ""
		s.capDepth, s.capBuf, s.capLong = s.depth, s.capBuf[:0], false
		switch c {
		case '{', '[', '"':
			s.capKind = c
		default:
			s.capKind = 0
		}
	}
	if s.capturing != "" && s.capKind == 0 && !s.inStr && (isSpace(c) || c == ',' || c == '}' || c == ']') {
		s.endCapture()
	}
	if s.capturing != "" {
		if len(s.capBuf) < maxCapture {
			s.capBuf = append(s.capBuf, c)
		} else {
			s.capLong = true
		}
	}
	if s.inStr {
		s.stringByte(c)
		return
	}
	switch c {
	case '"':
		s.inStr, s.esc = true, false
		s.strIsKey = s.expectKey && s.depth <= trackDepth && s.container[s.depth] == '{'
		s.str, s.strLong = s.str[:0], false
		s.expectKey = false
	case ':':
		if s.haveKey {
			s.haveKey = false
			if s.depth <= trackDepth {
				s.keys[s.depth] = s.key
			}
			s.pending = s.target(s.depth, s.key)
		}
	case ',':
		s.haveKey = false
		s.expectKey = s.depth <= trackDepth && s.container[s.depth] == '{'
	case '{', '[':
		s.haveKey = false
		s.depth++
		if s.depth <= trackDepth {
			s.container[s.depth] = c
			s.keys[s.depth] = ""
		}
		s.expectKey = c == '{'
	case '}', ']':
		s.haveKey, s.expectKey = false, false
		s.depth--
		if s.depth < 0 {
			s.broken = true
			return
		}
		if s.capturing != "" && s.depth == s.capDepth && (s.capKind == '{' || s.capKind == '[') {
			s.endCapture()
		}
	}
}

func (s *scanner) stringByte(c byte) {
	switch {
	case s.esc:
		s.esc = false
	case c == '\\':
		s.esc = true
	case c == '"':
		s.inStr = false
		if s.strIsKey {
			s.key, s.haveKey = string(s.str), !s.strLong
		}
		if s.capturing != "" && s.capKind == '"' && s.depth == s.capDepth {
			s.endCapture()
		}
		return
	}
	if s.strIsKey {
		if len(s.str) < maxKey {
			s.str = append(s.str, c)
		} else {
			s.strLong = true
		}
	}
}

// endCapture keeps the value just captured, unless it outgrew maxCapture.
func (s *scanner) endCapture() {
	if !s.capLong {
		if s.captures == nil {
			s.captures = make(map[string][]byte)
		}
		s.captures[s.capturing] = append([]byte(nil), s.capBuf...)
	}
	s.capturing = ""
}

// end finishes the document: a scalar value at its very end completes here.
func (s *scanner) end() {
	if s.capturing != "" && s.capKind == 0 && !s.inStr {
		s.endCapture()
	}
}

// reset readies s for the next document, keeping its buffers.
func (s *scanner) reset() {
	str, capBuf := s.str[:0], s.capBuf[:0]
	*s = scanner{str: str, capBuf: capBuf}
}
