package v1alpha1

import (
	"fmt"
	"time"
)

// MaxRefillSeconds bounds the time a bucket takes to refill from its
// lowest to full, (capacity + maxDebt) x refill period / refill tokens
// (maxDebt: 0 without spec.cost.response, spec.capacity by default), in
// whole seconds: 2^53 milliseconds, about 285,000 years. The token bucket
// script computes its times (a wait, a reset) in milliseconds in doubles,
// which hold every integer up to 2^53: within the bound they stay exact,
// and a full refill's expiry never reaches the 1e17 that Lua would write
// in exponent notation. (The script caps a key's expiry at 200 years, and
// the gateway's Durations end at 292 years: a slower bucket's reset is
// reported as the longest Duration.) The schema's rule on
// RateLimitRuleSpec (x-kubernetes-validations) holds the same number.
const MaxRefillSeconds = (1 << 53) / 1000

// MessageRefillTooSlow is the schema's message for a spec over
// MaxRefillSeconds; compiling such a spec (a rule file) fails with it too.
const MessageRefillTooSlow = "spec.capacity (plus spec.cost.response.maxDebt) must refill within 2^53 milliseconds (about 285,000 years): (capacity + maxDebt) x refill period / refill tokens must be at most 9007199254740 seconds"

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
