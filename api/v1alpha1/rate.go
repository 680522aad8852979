package v1alpha1

import (
	"fmt"
	"time"
)

// RefillRate returns the spec's refill rate as tokens per period, whichever
// field it is written in. The period is a whole number of seconds for every
// spec the API server accepts; ok is false for a spec that sets neither or
// both fields.
func (s *RateLimitRuleSpec) RefillRate() (tokens int64, period time.Duration, ok bool) {
	switch {
	case s.RefillPerSecond != nil && s.Refill == nil:
		return *s.RefillPerSecond, time.Second, true
	case s.Refill != nil && s.RefillPerSecond == nil:
		return s.Refill.Tokens, s.Refill.Period.Duration, true
	}
	return 0, 0, false
}

// FormatRate writes a rate in the short form shown by kubectl get: "100/s",
// "10/1m", "1000/1h", "5/1h30m".
func FormatRate(tokens int64, period time.Duration) string {
	if period == time.Second {
		return fmt.Sprintf("%d/s", tokens)
	}
	return fmt.Sprintf("%d/%s", tokens, shortDuration(period))
}

// shortDuration prints d without zero units: 1m instead of 1m0s.
func shortDuration(d time.Duration) string {
	var out string
	if h := d / time.Hour; h > 0 {
		out += fmt.Sprintf("%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		out += fmt.Sprintf("%dm", m)
		d -= m * time.Minute
	}
	if d > 0 || out == "" {
		out += fmt.Sprintf("%gs", d.Seconds())
	}
	return out
}
