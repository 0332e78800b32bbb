package redact

// stream is what the readers share: the bytes of a stream on their way through, searched as one
// run of payload, with framing (websocket frame headers) that is passed on where it stood but never
// searched, so that a secret split across frames is still found.
//
// pay holds the payload bytes in three parts: [0,rd) given to the reader already, [rd,rel) released
// and waiting to be read, [rel,len) held back. [0,done) is decided (searched, replaced); done is
// never before rel. marks are the framing, each to be given just before pay[at].
type stream struct {
	r             *Replacer
	pay           []byte
	rd, rel, done int
	marks         []mark
}

// mark is framing that goes before the payload byte at (the bytes still to give).
type mark struct {
	at int
	b  []byte
}

// payload adds b to the payload.
func (s *stream) payload(b []byte) { s.pay = append(s.pay, b...) }

// framing adds b as framing after the payload so far.
func (s *stream) framing(b []byte) {
	if n := len(s.marks); n > 0 && s.marks[n-1].at == len(s.pay) {
		s.marks[n-1].b = append(s.marks[n-1].b, b...)
		return
	}
	s.marks = append(s.marks, mark{at: len(s.pay), b: append([]byte(nil), b...)})
}

// settle decides what it can (see Replacer.settle) and releases all but the held tail, or all of it
// when final.
func (s *stream) settle(final bool) {
	var rel int
	s.pay, s.done, rel = s.r.settle(s.pay, s.done, final)
	s.rel = max(s.rel, rel)
}

// held reports whether bytes are held back (framing after them is held too).
func (s *stream) held() bool { return s.rel < len(s.pay) }

// pending reports whether released bytes or framing wait to be read.
func (s *stream) pending() bool {
	return s.rd < s.rel || len(s.marks) > 0 && s.marks[0].at <= s.rel
}

// copyOut copies into p what is released, in order, and returns how much.
func (s *stream) copyOut(p []byte) int {
	n := 0
	for n < len(p) {
		if len(s.marks) > 0 && s.marks[0].at == s.rd && s.rd <= s.rel {
			m := &s.marks[0]
			k := copy(p[n:], m.b)
			m.b = m.b[k:]
			n += k
			if len(m.b) == 0 {
				s.marks = s.marks[1:]
			}
			continue
		}
		end := s.rel
		if len(s.marks) > 0 && s.marks[0].at < end {
			end = s.marks[0].at
		}
		if end <= s.rd {
			break
		}
		k := copy(p[n:], s.pay[s.rd:end])
		s.rd += k
		n += k
	}
	return n
}

// compact drops what has been read, before more is added.
func (s *stream) compact() {
	if s.rd == 0 {
		return
	}
	s.pay = s.pay[:copy(s.pay, s.pay[s.rd:])]
	s.rel -= s.rd
	s.done -= s.rd
	for i := range s.marks {
		s.marks[i].at -= s.rd
	}
	s.rd = 0
}
