package rls

import (
	"math"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// rateUnits are the units a refill rate is reported in, smallest first.
var rateUnits = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	ms   uint64
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, 1000},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, 60 * 1000},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, 3600 * 1000},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 86400 * 1000},
}

// RateUnit expresses a token bucket's refill of tokens every periodMs
// milliseconds as requests per unit, the shape of Envoy's
// RateLimitResponse.RateLimit:
//
//   - the smallest of second, minute, hour and day in which the rate is a
//     whole number: 100/s → 100 per SECOND, 10 per minute → 10 per MINUTE,
//     1000 per hour → 1000 per HOUR;
//   - else the largest of them in which the rounded number fits in 32 bits
//     (day, unless the rate is huge), as it is the most precise: 1 per 7s →
//     12343 per DAY; at least 1 (a rate below one per day is reported as 1
//     per DAY).
//
// tokens and periodMs must be positive; with rules' bounds the products stay
// far below 2^64.
func RateUnit(tokens, periodMs int64) (uint32, rlsv3.RateLimitResponse_RateLimit_Unit) {
	if tokens <= 0 || periodMs <= 0 {
		return 0, rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	}
	t, p := uint64(tokens), uint64(periodMs)
	for _, u := range rateUnits {
		if n := t * u.ms; n%p == 0 && n/p <= math.MaxUint32 {
			return uint32(n / p), u.unit
		}
	}
	for i := len(rateUnits) - 1; i >= 0; i-- {
		v := math.Round(float64(t) * float64(rateUnits[i].ms) / float64(p))
		if v <= math.MaxUint32 {
			return uint32(max(1, v)), rateUnits[i].unit
		}
	}
	return math.MaxUint32, rlsv3.RateLimitResponse_RateLimit_SECOND
}
