package snapshot

import (
	"fmt"
	"sync"
	"time"
	// The gateway and the controller must know the same zones whatever
	// the image holds: the IANA database is compiled in.
	_ "time/tzdata"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
	"github.com/tollgate-dev/tollgate/pkg/clip"
)

// QuotaPeriod is the compiled spec.quota.period; 0 means no quota.
type QuotaPeriod uint8

const (
	// QuotaNone: the rule has no quota.
	QuotaNone QuotaPeriod = iota
	// QuotaDay starts at local midnight.
	QuotaDay
	// QuotaWeek starts on Monday at local midnight.
	QuotaWeek
	// QuotaMonth starts on the first of the month at local midnight.
	QuotaMonth
)

// Bounds of a quota; they match the CRD schema.
const (
	MaxQuota         = 1_000_000_000_000
	MaxTimeZoneBytes = 64
)

func (p QuotaPeriod) String() string {
	switch p {
	case QuotaNone:
		return "None"
	case QuotaDay:
		return "Day"
	case QuotaWeek:
		return "Week"
	case QuotaMonth:
		return "Month"
	}
	return fmt.Sprintf("QuotaPeriod(%d)", uint8(p))
}

// Adjective names the period in the limit headers: daily, weekly, monthly.
func (p QuotaPeriod) Adjective() string {
	switch p {
	case QuotaDay:
		return "daily"
	case QuotaWeek:
		return "weekly"
	case QuotaMonth:
		return "monthly"
	}
	return "quota"
}

var specQuotaPeriods = map[v1alpha1.QuotaPeriod]QuotaPeriod{
	v1alpha1.QuotaDay: QuotaDay, v1alpha1.QuotaWeek: QuotaWeek, v1alpha1.QuotaMonth: QuotaMonth,
}

// compileQuota sets r's quota from spec.quota.
func (r *Rule) compileQuota(q *v1alpha1.Quota, source string) error {
	if q == nil {
		return nil
	}
	p, ok := specQuotaPeriods[q.Period]
	if !ok {
		return fmt.Errorf("%s: spec.quota.period %q: want Day, Week or Month", source, clip.String(string(q.Period)))
	}
	r.QuotaLimit, r.QuotaPeriod, r.QuotaZone = q.Limit, p, q.TimeZone
	if r.QuotaZone == "" {
		r.QuotaZone = "UTC"
	}
	return nil
}

// HasQuota reports whether the rule carries a calendar quota.
func (r *Rule) HasQuota() bool { return r.QuotaPeriod != QuotaNone }

// validateQuota checks the quota fields of a rule from an untrusted source.
// An unknown time zone is named as spec.quota.timeZone: the controller's
// status shows this message for a zone the schema's pattern let through.
func (r *Rule) validateQuota() error {
	if r.QuotaPeriod == QuotaNone {
		if r.QuotaLimit != 0 || r.QuotaZone != "" {
			return fmt.Errorf("rule %s/%s: quota limit or time zone without a quota period", r.Tenant, r.Route)
		}
		return nil
	}
	switch {
	case r.QuotaPeriod > QuotaMonth:
		return fmt.Errorf("rule %s/%s: unknown quota period %d", r.Tenant, r.Route, r.QuotaPeriod)
	case r.QuotaLimit < 1 || r.QuotaLimit > MaxQuota:
		return fmt.Errorf("rule %s/%s: spec.quota.limit %d out of range [1, %d]", r.Tenant, r.Route, r.QuotaLimit, int64(MaxQuota))
	}
	if _, err := r.QuotaLocation(); err != nil {
		return fmt.Errorf("rule %s/%s: %w", r.Tenant, r.Route, err)
	}
	return nil
}

// zones caches loaded time zones by name (only valid ones, so its size is
// bounded by the IANA database).
var zones sync.Map

// QuotaLocation is the quota's time zone. Names are IANA names; "Local" and
// "" (which time.LoadLocation reads as the machine's zone and UTC) are
// refused, as are names that are no zone.
func (r *Rule) QuotaLocation() (*time.Location, error) {
	return LoadZone(r.QuotaZone)
}

// LoadZone loads an IANA time zone by name, cached.
func LoadZone(name string) (*time.Location, error) {
	if v, ok := zones.Load(name); ok {
		return v.(*time.Location), nil
	}
	if name == "" || name == "Local" || len(name) > MaxTimeZoneBytes {
		return nil, fmt.Errorf("spec.quota.timeZone %q is not an IANA time zone name", clip.String(name))
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("spec.quota.timeZone %q is not a known IANA time zone", clip.String(name))
	}
	zones.Store(name, loc)
	return loc, nil
}

// PeriodAt is the calendar period of kind p in loc that contains t:
// [start, end). A period starts at the first instant of its first local
// day: midnight, the first one where a daylight saving change makes it
// happen twice, or the first time after it where a change skips it. Weeks start on Monday. Lengths follow the zone: a day
// with a daylight saving change lasts 23 or 25 hours, a month its own
// number of days.
func PeriodAt(p QuotaPeriod, loc *time.Location, t time.Time) (start, end time.Time) {
	l := t.In(loc)
	y, m, d := l.Date()
	switch p {
	case QuotaWeek:
		// Monday = 0 ... Sunday = 6.
		back := (int(l.Weekday()) + 6) % 7
		return dayStart(y, m, d-back, loc), dayStart(y, m, d-back+7, loc)
	case QuotaMonth:
		return dayStart(y, m, 1, loc), dayStart(y, m+1, 1, loc)
	}
	return dayStart(y, m, d, loc), dayStart(y, m, d+1, loc)
}

// dayStart is the first instant of the local day y-m-d (d may overflow the
// month, as in time.Date). time.Date alone is not enough at daylight saving
// changes: where a change skips midnight it may answer an instant of the day
// before (00:00 at the new offset), and the day then starts when the change
// happens; where a change at 01:00 goes back to 00:00, midnight happens twice
// and time.Date may answer the second, so the day starts at the first, in the
// offset before the change.
func dayStart(y int, m time.Month, d int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC) // normalises y, m, d
	if ly, lm, ld := t.Date(); ly != want.Year() || lm != want.Month() || ld != want.Day() {
		_, end := t.ZoneBounds()
		return end
	}
	// Midnight in the offset before t's is an earlier instant of the same
	// day if that offset still held then; it can only if the change came
	// less than the offsets' difference (at most a day or so) before t.
	if zoneStart, _ := t.ZoneBounds(); !zoneStart.IsZero() && t.Sub(zoneStart) < 48*time.Hour {
		prev := zoneStart.Add(-time.Nanosecond)
		_, offset := prev.In(loc).Zone()
		prevStart, _ := prev.In(loc).ZoneBounds()
		if first := want.Add(-time.Duration(offset) * time.Second); first.Before(t) && first.Before(zoneStart) && !first.Before(prevStart) {
			return first.In(loc)
		}
	}
	return t
}
