package usage

import "strings"

// JSON scans a stream of JSON values (one document, or several one after
// the other) for the number at a path of object keys. Its state is the
// containers along the path (at most one more than the path's keys), a
// counter for the deeper ones, the key being compared and the number being
// captured: bounded by the path, whatever the body. Keys with escapes never
// match. A body that is not JSON stops the scan at the first byte that
// cannot be JSON; what was found before it counts.
type JSON struct {
	path  []string
	stack []level // containers along the path; deeper ones in deep
	deep  int     // containers open below the tracked ones
	st    state
	// key: the current key still matches seg (an index of path) over its
	// first keyLen bytes.
	keyMatch bool
	keyLen   int
	// target: the value starting now is at the path; cont: it is the
	// value of a matching key short of the path's end, whose keys (if it
	// is an object) continue the path.
	target, cont bool
	inNum        bool
	num          []byte
	found        bool
	raw          string
	broken       bool
}

type level struct {
	object bool
	ok     bool // the keys down to this container match the path
}

type state uint8

const (
	sValue     state = iota // a value is expected
	sKeyOrEnd               // after '{' or ',' in an object: a key (or '}')
	sKey                    // in a key
	sKeyEsc                 // after '\' in a key
	sColon                  // after a key
	sAfter                  // after a value: ',' or the container's end
	sString                 // in a string value
	sStringEsc              // after '\' in a string value
	sLiteral                // in a number, true, false or null
	sDeep                   // in containers below the tracked ones
	sDeepString
	sDeepEsc
)

// NewJSON scans for path, object keys joined by dots (usage.total_tokens).
func NewJSON(path string) *JSON {
	p := strings.Split(path, ".")
	return &JSON{path: p, stack: make([]level, 0, len(p)+1), num: make([]byte, 0, maxNumber)}
}

// Reset starts a new body (an SSE event), keeping the path.
func (j *JSON) Reset() {
	*j = JSON{path: j.path, stack: j.stack[:0], num: j.num[:0]}
}

// Write implements Scanner.
func (j *JSON) Write(p []byte) (int, error) {
	for i := 0; i < len(p) && !j.broken; i++ {
		j.step(p[i])
	}
	return len(p), nil
}

// Finish implements Scanner.
func (j *JSON) Finish() {
	if j.st == sLiteral && !j.broken {
		j.endLiteral()
	}
}

// Found implements Scanner.
func (j *JSON) Found() (string, bool) { return j.raw, j.found }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (j *JSON) step(c byte) {
	switch j.st {
	case sValue:
		j.value(c)
	case sKeyOrEnd:
		j.keyOrEnd(c)
	case sKey, sKeyEsc:
		j.key(c)
	case sColon:
		switch {
		case c == ':':
			j.st = sValue
		case !isSpace(c):
			j.broken = true
		}
	case sAfter:
		j.after(c)
	case sString, sStringEsc:
		j.str(c)
	case sLiteral:
		j.literal(c)
	default:
		j.deepStep(c)
	}
}

// value starts a value (or skips space before one).
func (j *JSON) value(c byte) {
	target, cont := j.target, j.cont
	j.target, j.cont = false, false
	switch {
	case isSpace(c):
		j.target, j.cont = target, cont
	case c == '{' || c == '[':
		j.markFound(target, "")
		// The root object's keys start the path.
		j.open(c == '{', c == '{' && (cont || len(j.stack) == 0))
	case c == '"':
		j.markFound(target, "")
		j.st = sString
	case c == ']' && len(j.stack) > 0 && !j.top().object:
		j.close(false) // an empty array
	case c == '-' || c >= '0' && c <= '9' || c == 't' || c == 'f' || c == 'n':
		j.st, j.inNum = sLiteral, target && c != 't' && c != 'f' && c != 'n'
		j.markFound(target && !j.inNum, "")
		j.num = append(j.num[:0], c)
	default:
		j.broken = true
	}
}

// markFound records a value at the path that is not a number.
func (j *JSON) markFound(target bool, raw string) {
	if target {
		j.found, j.raw = true, raw
	}
}

// open enters a container; ok says its keys continue the path (the root
// object, or the value of a matching key short of the path's end). Below
// the path's depth nothing can match: those containers are only counted.
func (j *JSON) open(object, ok bool) {
	if len(j.stack) >= len(j.path) {
		j.st, j.deep = sDeep, 1
		return
	}
	j.stack = append(j.stack, level{object: object, ok: ok})
	if object {
		j.st = sKeyOrEnd
	} else {
		j.st = sValue
	}
}

func (j *JSON) top() level { return j.stack[len(j.stack)-1] }

// close leaves the innermost container on c ('}' or ']').
func (j *JSON) close(object bool) {
	if len(j.stack) == 0 || j.top().object != object {
		j.broken = true
		return
	}
	j.stack = j.stack[:len(j.stack)-1]
	j.afterValue()
}

// afterValue is the state after a complete value.
func (j *JSON) afterValue() {
	if len(j.stack) == 0 {
		j.st = sValue // the next top-level value, if any
		return
	}
	j.st = sAfter
}
