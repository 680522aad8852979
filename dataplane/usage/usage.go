// Package usage finds the cost an upstream reports in its response (a
// response-cost rule, spec.cost.response) while the response streams to the
// client: a number at a path of object keys in a JSON body (JSON), or in the
// data of the events of a text/event-stream body (SSE). Both keep a bounded
// state whatever the body (a few dozen bytes, independent of its size and
// nesting) and never buffer it. Parse reads the value found.
package usage

import (
	"math"
	"strconv"
)

// Scanner is fed a response body in pieces as it streams, then finished;
// Found is the value at the path, raw (the last one the body held).
type Scanner interface {
	// Write scans p; it never fails.
	Write(p []byte) (int, error)
	// Finish ends the body (a number at its very end counts).
	Finish()
	// Found returns the raw text of the last value at the path, and false
	// when the body held none. A value that is not a number (a string, an
	// object, true) is returned as "" with true.
	Found() (raw string, ok bool)
}

// maxNumber bounds the captured text of a number: a longer one is kept as
// its first maxNumber bytes and read as huge (Parse gives max).
const maxNumber = 40

// Parse reads a reported cost: a non-negative number in decimal digits,
// optionally with a fraction and exponent (JSON's number syntax without a
// sign), rounded up; above max it is max. ok is false for anything else
// (empty, negative, not a number): the rule's default then applies.
func Parse(raw string, max int64) (cost int64, ok bool) {
	if raw == "" || raw[0] < '0' || raw[0] > '9' {
		return 0, false
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil && !isRange(err) {
		return 0, false
	}
	if len(raw) >= maxNumber || f >= float64(max) {
		return max, true // huge (or cut at maxNumber digits): bounded
	}
	return int64(math.Ceil(f)), true
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
