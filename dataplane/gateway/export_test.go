package gateway

import "time"

// ShiftCalendar moves the gateway's clock, and Redis's time as the quota
// script reads it, by d: a test can put a gateway just before a month
// boundary of its choice while Redis keeps its real clock.
func ShiftCalendar(o *Options, d time.Duration) {
	o.Clock = func() time.Time { return time.Now().Add(d) }
	o.quotaShift = d
}
