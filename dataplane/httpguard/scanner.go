package httpguard

// Verdict is what Scanner.Scan found.
type Verdict uint8

const (
	// Clean: nothing to act on.
	Clean Verdict = iota
	// Refused: a bare LF or CR inside a header block; the returned length
	// ends at the byte that was replaced with NUL.
	Refused
	// Unfollowable: a header block announced a body whose end the Scanner
	// cannot find; nothing after it is scanned.
	Unfollowable
	// Preface: the stream opened with the HTTP/2 connection preface (a
	// Scanner with H2C set): HTTP/2 frames follow, which are binary and
	// not scanned.
	Preface
)

// preface opens an HTTP/2 connection without TLS (h2c with prior knowledge,
// RFC 9113 section 3.4). As HTTP/1.x it reads as two header blocks without
// a bare LF or CR, so a Scanner passes it either way; what follows it is
// binary.
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Scanner states.
const (
	inHeader uint8 = iota
	inBody
	stopped
)

// lineKeep is how many bytes of a header line are kept for framing fields:
// "content-length: " and 19 digits fit.
const lineKeep = 48

// Scanner follows the HTTP/1.x request stream of one connection, fed in
// order by Scan: it checks header blocks for bare LF and CR and skips
// Content-Length bodies. The zero value expects a request line.
type Scanner struct {
	// H2C lets a stream that opens with the HTTP/2 preface through
	// unscanned (Preface). Set it before the first Scan.
	H2C bool
	// pre is the number of stream bytes that matched the preface so far.
	pre      int
	state    uint8
	prevCR   bool
	lines    int // complete lines of the current block
	lineLen  int // bytes of the current line so far, CR excluded
	line     [lineKeep]byte
	bodyLeft int64
	length   int64 // Content-Length of the block; -1 none
	unclear  bool  // Transfer-Encoding, an unparsable or repeated different Content-Length, or a folded line
}

// Scan checks p, the next bytes of the stream. On Refused it has replaced
// p[n-1] with NUL, and n is the number of bytes to deliver; the rest of the
// stream must not be delivered. Otherwise n is len(p).
func (s *Scanner) Scan(p []byte) (n int, v Verdict) {
	for i := 0; i < len(p); {
		switch s.state {
		case stopped:
			return len(p), Clean
		case inBody:
			k := int64(len(p) - i)
			if k > s.bodyLeft {
				k = s.bodyLeft
			}
			i += int(k)
			s.bodyLeft -= k
			if s.bodyLeft == 0 {
				s.reset()
			}
			continue
		}
		b := p[i]
		if s.H2C && s.pre < len(preface) {
			if s.pre == len(preface)-1 && b == preface[s.pre] {
				s.state = stopped
				return len(p), Preface
			}
			if b == preface[s.pre] {
				s.pre++
			} else {
				s.H2C = false
			}
		}
		switch {
		case b == '\n' && !s.prevCR, s.prevCR && b != '\n':
			p[i] = 0
			s.state = stopped
			return i + 1, Refused
		case b == '\r':
			s.prevCR = true
		case b == '\n':
			s.prevCR = false
			if v := s.endLine(); v != Clean {
				return len(p), v
			}
		default:
			if s.lineLen < lineKeep {
				s.line[s.lineLen] = b
			}
			s.lineLen++
		}
		i++
	}
	return len(p), Clean
}

// endLine handles a line ended by CRLF.
func (s *Scanner) endLine() Verdict {
	n := s.lineLen
	s.lineLen = 0
	if n == 0 {
		if s.lines == 0 {
			return Clean // an empty line before the request line: net/http refuses it
		}
		switch {
		case s.unclear:
			s.state = stopped
			return Unfollowable
		case s.length > 0:
			s.state, s.bodyLeft = inBody, s.length
			s.lines, s.length = 0, -1
		default:
			s.reset()
		}
		return Clean
	}
	s.lines++
	if s.lines == 1 {
		s.length = -1
		return Clean // the request line
	}
	line := s.line[:min(n, lineKeep)]
	if line[0] == ' ' || line[0] == '\t' {
		s.unclear = true // obs-fold: a continued field
		return Clean
	}
	if value, ok := field(line, "content-length"); ok {
		l, ok := parseLength(value, n > lineKeep)
		if !ok || (s.length >= 0 && s.length != l) {
			s.unclear = true
		}
		s.length = l
	} else if _, ok := field(line, "transfer-encoding"); ok {
		s.unclear = true
	}
	return Clean
}

// reset expects the next request line.
func (s *Scanner) reset() {
	s.state, s.lines, s.length, s.unclear, s.bodyLeft = inHeader, 0, -1, false, 0
}

// field returns the value of line if its field name is name (ASCII case
// insensitive; name is lower case).
func field(line []byte, name string) ([]byte, bool) {
	if len(line) <= len(name) || line[len(name)] != ':' {
		return nil, false
	}
	for i := 0; i < len(name); i++ {
		if line[i]|0x20 != name[i] {
			return nil, false
		}
	}
	return line[len(name)+1:], true
}

// parseLength parses a Content-Length value with optional blanks around it;
// cut means the line was longer than what was kept.
func parseLength(v []byte, cut bool) (int64, bool) {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	if cut || len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var l int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		l = l*10 + int64(c-'0')
	}
	return l, true
}
