package usage

// SSE scans a text/event-stream body: the data lines of each event (joined
// by newlines, as the event's data is) go through a JSON scan of their own,
// and the last event whose data holds the path gives the value (the final
// usage event of a streamed completion; a "[DONE]" event after it holds
// nothing and changes nothing). Lines end in CR, LF or CRLF; other fields
// and comments are skipped. The state is one JSON scan and the position in
// the current line: bounded, whatever the events' size.
type SSE struct {
	ev JSON
	// line: bytes seen in the current line; field: bytes of "data:"
	// matched at its start (5: a data line); skipSpace: the one space
	// after "data:" is not part of the data.
	line, field int
	skipSpace   bool
	afterCR     bool
	data        bool // the event has data lines
	found       bool
	raw         string
}

const dataField = "data:"

// NewSSE scans for path, object keys joined by dots.
func NewSSE(path string) *SSE { return &SSE{ev: *NewJSON(path)} }

// Write implements Scanner.
func (s *SSE) Write(p []byte) (int, error) {
	for _, c := range p {
		s.step(c)
	}
	return len(p), nil
}

func (s *SSE) step(c byte) {
	if s.afterCR && c == '\n' {
		s.afterCR = false // the LF of a CRLF
		return
	}
	s.afterCR = c == '\r'
	if c == '\r' || c == '\n' {
		s.endLine()
		return
	}
	s.line++
	switch {
	case s.field < len(dataField):
		if s.field == s.line-1 && c == dataField[s.field] {
			if s.field++; s.field == len(dataField) {
				s.skipSpace, s.data = true, true
			}
		}
	case s.skipSpace && c == ' ':
		s.skipSpace = false
	default:
		s.skipSpace = false
		if !s.ev.broken {
			s.ev.step(c)
		}
	}
}

// endLine ends a line; an empty one ends the event.
func (s *SSE) endLine() {
	if s.line == 0 {
		s.endEvent()
		return
	}
	if s.field == len(dataField) {
		if !s.ev.broken {
			s.ev.step('\n') // data lines are joined by newlines
		}
	}
	s.line, s.field, s.skipSpace = 0, 0, false
}

func (s *SSE) endEvent() {
	if s.data {
		s.ev.Finish()
		if raw, ok := s.ev.Found(); ok {
			s.found, s.raw = true, raw
		}
		s.ev.Reset()
	}
	s.data = false
}

// Finish implements Scanner: an event the body ends in without its blank
// line counts too (an upstream that stops short of it).
func (s *SSE) Finish() {
	if s.line > 0 {
		s.endLine()
	}
	s.endEvent()
}

// Found implements Scanner.
func (s *SSE) Found() (string, bool) { return s.raw, s.found }
