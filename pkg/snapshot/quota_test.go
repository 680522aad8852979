package snapshot

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/api/v1alpha1"
)

// TestPeriodAt: the period holding an instant, in its zone, for each kind:
// local midnight starts, Monday weeks, month lengths, leap years, days of
// 23 and 25 hours at daylight saving changes, a zone whose midnight is
// skipped and one whose midnight happens twice.
func TestPeriodAt(t *testing.T) {
	cases := []struct {
		name       string
		period     QuotaPeriod
		zone       string
		at         string // RFC 3339
		start, end string // RFC 3339, in the zone's offsets
		hours      float64
	}{
		{"UTC day", QuotaDay, "UTC", "2026-03-10T15:04:05Z", "2026-03-10T00:00:00Z", "2026-03-11T00:00:00Z", 24},
		{"day at its first instant", QuotaDay, "UTC", "2026-03-10T00:00:00Z", "2026-03-10T00:00:00Z", "2026-03-11T00:00:00Z", 24},
		{"day at its last millisecond", QuotaDay, "Europe/Paris", "2026-03-10T23:59:59.999+01:00", "2026-03-10T00:00:00+01:00", "2026-03-11T00:00:00+01:00", 24},
		{"Paris day of the spring change (23 h)", QuotaDay, "Europe/Paris", "2026-03-29T12:00:00+02:00", "2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 23},
		{"Paris day of the autumn change (25 h)", QuotaDay, "Europe/Paris", "2026-10-25T02:30:00+01:00", "2026-10-25T00:00:00+02:00", "2026-10-26T00:00:00+01:00", 25},
		{"New York spring day (23 h)", QuotaDay, "America/New_York", "2026-03-08T01:59:00-05:00", "2026-03-08T00:00:00-05:00", "2026-03-09T00:00:00-04:00", 23},
		{"Tokyo day is not the UTC day", QuotaDay, "Asia/Tokyo", "2026-03-10T20:00:00Z", "2026-03-11T00:00:00+09:00", "2026-03-12T00:00:00+09:00", 24},
		{"Santiago: midnight skipped, the day starts at 01:00", QuotaDay, "America/Santiago", "2026-09-06T12:00:00-03:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00", 23},
		{"Week from Monday", QuotaWeek, "UTC", "2026-12-03T10:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z", 168},
		{"Week on Monday itself", QuotaWeek, "UTC", "2026-11-30T00:00:00Z", "2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z", 168},
		{"Week on Sunday night", QuotaWeek, "Europe/Paris", "2026-12-06T23:59:00+01:00", "2026-11-30T00:00:00+01:00", "2026-12-07T00:00:00+01:00", 168},
		{"Week across the year end", QuotaWeek, "UTC", "2027-01-01T12:00:00Z", "2026-12-28T00:00:00Z", "2027-01-04T00:00:00Z", 168},
		{"Paris week of the spring change", QuotaWeek, "Europe/Paris", "2026-03-27T12:00:00+01:00", "2026-03-23T00:00:00+01:00", "2026-03-30T00:00:00+02:00", 167},
		{"January: 31 days", QuotaMonth, "UTC", "2026-01-31T23:00:00Z", "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z", 31 * 24},
		{"February: 28 days", QuotaMonth, "UTC", "2026-02-14T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z", 28 * 24},
		{"February of a leap year: 29 days", QuotaMonth, "UTC", "2028-02-29T12:00:00Z", "2028-02-01T00:00:00Z", "2028-03-01T00:00:00Z", 29 * 24},
		{"February 2100 is not leap", QuotaMonth, "UTC", "2100-02-28T12:00:00Z", "2100-02-01T00:00:00Z", "2100-03-01T00:00:00Z", 28 * 24},
		{"April: 30 days", QuotaMonth, "UTC", "2026-04-30T00:00:00Z", "2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", 30 * 24},
		{"December to January", QuotaMonth, "UTC", "2026-12-01T21:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z", 31 * 24},
		{"Paris March (spring change)", QuotaMonth, "Europe/Paris", "2026-03-31T23:59:59+02:00", "2026-03-01T00:00:00+01:00", "2026-04-01T00:00:00+02:00", 31*24 - 1},
		{"Paris: 1 April 00:30 local is April", QuotaMonth, "Europe/Paris", "2026-03-31T22:30:00Z", "2026-04-01T00:00:00+02:00", "2026-05-01T00:00:00+02:00", 30 * 24},
		{"New York November (autumn change)", QuotaMonth, "America/New_York", "2026-11-15T00:00:00-05:00", "2026-11-01T00:00:00-04:00", "2026-12-01T00:00:00-05:00", 30*24 + 1},
		{"Kolkata: half-hour offset", QuotaMonth, "Asia/Kolkata", "2026-05-31T18:30:00Z", "2026-06-01T00:00:00+05:30", "2026-07-01T00:00:00+05:30", 30 * 24},

		// Midnight twice (daylight saving ends at 01:00, back to 00:00):
		// the day starts at the first midnight, the day before ends there.
		{"Gaza 2012: midnight twice, the day starts at the first", QuotaDay, "Asia/Gaza", "2012-09-21T12:00:00+02:00", "2012-09-21T00:00:00+03:00", "2012-09-22T00:00:00+02:00", 25},
		{"Gaza 2021: in the hour before the second midnight", QuotaDay, "Asia/Gaza", "2021-10-29T00:30:00+03:00", "2021-10-29T00:00:00+03:00", "2021-10-30T00:00:00+02:00", 25},
		{"Gaza 2021: the day before ends at the first midnight", QuotaDay, "Asia/Gaza", "2021-10-28T23:59:00+03:00", "2021-10-28T00:00:00+03:00", "2021-10-29T00:00:00+03:00", 24},
		{"Amman 2010: midnight twice", QuotaDay, "Asia/Amman", "2010-10-29T00:10:00+02:00", "2010-10-29T00:00:00+03:00", "2010-10-30T00:00:00+02:00", 25},
		{"Amman 2021: midnight twice", QuotaDay, "Asia/Amman", "2021-10-29T18:00:00+02:00", "2021-10-29T00:00:00+03:00", "2021-10-30T00:00:00+02:00", 25},
		{"Vostok 2023: midnight twice, two hours back", QuotaDay, "Antarctica/Vostok", "2023-12-18T01:00:00+05:00", "2023-12-18T00:00:00+07:00", "2023-12-19T00:00:00+05:00", 26},
		{"Jerusalem 2002: a week from a Monday with midnight twice", QuotaWeek, "Asia/Jerusalem", "2002-10-09T12:00:00+02:00", "2002-10-07T00:00:00+03:00", "2002-10-14T00:00:00+02:00", 169},
		{"Jerusalem 2002: the week before ends at the first midnight", QuotaWeek, "Asia/Jerusalem", "2002-10-06T23:30:00+03:00", "2002-09-30T00:00:00+03:00", "2002-10-07T00:00:00+03:00", 168},
		{"Gaza 2004: a month from a first with midnight twice", QuotaMonth, "Asia/Gaza", "2004-10-15T12:00:00+02:00", "2004-10-01T00:00:00+03:00", "2004-11-01T00:00:00+02:00", 31*24 + 1},
		{"Gaza 2004: the month before ends at the first midnight", QuotaMonth, "Asia/Gaza", "2004-09-30T23:30:00+03:00", "2004-09-01T00:00:00+03:00", "2004-10-01T00:00:00+03:00", 30 * 24},

		// No midnight (daylight saving starts at 00:00, on to 01:00): the
		// day starts at the first instant it has, 01:00.
		{"Sao Paulo 2018: midnight skipped", QuotaDay, "America/Sao_Paulo", "2018-11-04T12:00:00-02:00", "2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00", 23},
		{"Sao Paulo 2018: the day before ends at 01:00", QuotaDay, "America/Sao_Paulo", "2018-11-03T23:59:00-03:00", "2018-11-03T00:00:00-03:00", "2018-11-04T01:00:00-02:00", 24},
		{"Beirut 2020: midnight skipped", QuotaDay, "Asia/Beirut", "2020-03-29T01:00:00+03:00", "2020-03-29T01:00:00+03:00", "2020-03-30T00:00:00+03:00", 23},
		{"Tehran 2021: a week from a Monday without midnight", QuotaWeek, "Asia/Tehran", "2021-03-24T12:00:00+04:30", "2021-03-22T01:00:00+04:30", "2021-03-29T00:00:00+04:30", 167},
		{"Amman 2016: a month from a first without midnight", QuotaMonth, "Asia/Amman", "2016-04-01T01:00:00+03:00", "2016-04-01T01:00:00+03:00", "2016-05-01T00:00:00+03:00", 30*24 - 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			loc, err := LoadZone(c.zone)
			if err != nil {
				t.Fatal(err)
			}
			at := mustTime(t, c.at)
			start, end := PeriodAt(c.period, loc, at)
			if want := mustTime(t, c.start); !start.Equal(want) {
				t.Errorf("start %v, want %v", start, want)
			}
			if want := mustTime(t, c.end); !end.Equal(want) {
				t.Errorf("end %v, want %v", end, want)
			}
			if h := end.Sub(start).Hours(); h != c.hours {
				t.Errorf("lasts %v hours, want %v", h, c.hours)
			}
			if at.Before(start) || !at.Before(end) {
				t.Errorf("%v is not in [%v, %v)", at, start, end)
			}
			// The next period starts where this one ends.
			if s2, _ := PeriodAt(c.period, loc, end); !s2.Equal(end) {
				t.Errorf("the next period starts at %v, want %v", s2, end)
			}
		})
	}
}

// TestPeriodAtEveryHour: over two years of hours in zones with daylight
// saving (both hemispheres), a skipped and a doubled midnight, every instant
// lies in its period, and periods tile time without gaps.
func TestPeriodAtEveryHour(t *testing.T) {
	for _, zone := range []string{"Europe/Paris", "America/New_York", "Australia/Sydney", "America/Santiago", "America/Havana", "Pacific/Chatham"} {
		loc, err := LoadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []QuotaPeriod{QuotaDay, QuotaWeek, QuotaMonth} {
			var prevEnd time.Time
			for at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); at.Year() < 2028; at = at.Add(time.Hour) {
				start, end := PeriodAt(p, loc, at)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s %v: %v not in [%v, %v)", zone, p, at, start, end)
				}
				if !prevEnd.IsZero() && start.After(prevEnd) {
					t.Fatalf("%s %v: gap between %v and %v", zone, p, prevEnd, start)
				}
				prevEnd = end
			}
		}
	}
}

// TestPeriodStartsAtFirstInstant: around every daylight saving change of
// zones where local midnight happens twice (Gaza, Amman 2010-2021, Havana,
// Vostok, Jerusalem 2001-2002) or not at all (Sao Paulo, Beirut, Tehran), a
// period starts at the first instant of its first local day (no instant of
// that day before it), on that day (the instant's day, a Monday, a first),
// and the period before ends where it starts.
func TestPeriodStartsAtFirstInstant(t *testing.T) {
	for _, zone := range []string{"Asia/Gaza", "Asia/Amman", "America/Havana", "Antarctica/Vostok", "Asia/Jerusalem", "America/Sao_Paulo", "Asia/Beirut", "Asia/Tehran"} {
		loc, err := LoadZone(zone)
		if err != nil {
			t.Fatal(err)
		}
		for change := range zoneChanges(loc, 2000, 2024) {
			for at := change.Add(-48 * time.Hour); at.Before(change.Add(48 * time.Hour)); at = at.Add(30 * time.Minute) {
				for _, p := range []QuotaPeriod{QuotaDay, QuotaWeek, QuotaMonth} {
					checkFirstInstant(t, zone, p, loc, at)
				}
			}
		}
	}
}

// zoneChanges yields loc's offset changes from the start of year from to
// the end of year to.
func zoneChanges(loc *time.Location, from, to int) func(yield func(time.Time) bool) {
	return func(yield func(time.Time) bool) {
		at := time.Date(from, 1, 1, 0, 0, 0, 0, time.UTC)
		for at.Year() <= to {
			_, end := at.In(loc).ZoneBounds()
			if end.IsZero() || !yield(end) {
				return
			}
			at = end
		}
	}
}

func checkFirstInstant(t *testing.T, zone string, p QuotaPeriod, loc *time.Location, at time.Time) {
	t.Helper()
	start, end := PeriodAt(p, loc, at)
	l, s, before := at.In(loc), start.In(loc), start.Add(-time.Nanosecond).In(loc)
	first := time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, time.UTC)
	switch p {
	case QuotaWeek:
		first = first.AddDate(0, 0, -((int(l.Weekday()) + 6) % 7))
	case QuotaMonth:
		first = first.AddDate(0, 0, 1-l.Day())
	}
	switch {
	case at.Before(start) || !at.Before(end):
		t.Fatalf("%s %v: %v not in [%v, %v)", zone, p, l, s, end.In(loc))
	case s.Year() != first.Year() || s.YearDay() != first.YearDay():
		t.Fatalf("%s %v at %v: starts %v, not on %v", zone, p, l, s, first.Format(time.DateOnly))
	case before.Year() == s.Year() && before.YearDay() == s.YearDay():
		t.Fatalf("%s %v at %v: starts %v, but %v is the same day", zone, p, l, s, before)
	}
	if _, prevEnd := PeriodAt(p, loc, start.Add(-time.Nanosecond)); !prevEnd.Equal(start) {
		t.Fatalf("%s %v at %v: starts %v, the period before ends %v", zone, p, l, s, prevEnd.In(loc))
	}
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestQuotaCompileAndValidate: spec.quota compiles into the q fields; a zone
// the schema's pattern lets through but the database does not know is
// refused naming spec.quota.timeZone, as is any invalid quota in a rule
// from an untrusted source.
func TestQuotaCompileAndValidate(t *testing.T) {
	spec := func(q *v1alpha1.Quota) *v1alpha1.RateLimitRuleSpec {
		rate := int64(10)
		return &v1alpha1.RateLimitRuleSpec{Tenant: "shop-a", Route: "r", Capacity: 10, RefillPerSecond: &rate, Quota: q}
	}
	r, err := FromSpec(spec(&v1alpha1.Quota{Limit: 1000, Period: v1alpha1.QuotaMonth, TimeZone: "Europe/Paris"}), "ns/q")
	if err != nil {
		t.Fatal(err)
	}
	if r.QuotaLimit != 1000 || r.QuotaPeriod != QuotaMonth || r.QuotaZone != "Europe/Paris" || !r.HasQuota() {
		t.Fatalf("compiled %+v", r)
	}
	if r, err := FromSpec(spec(&v1alpha1.Quota{Limit: 5, Period: v1alpha1.QuotaDay}), "ns/q"); err != nil || r.QuotaZone != "UTC" {
		t.Fatalf("no zone: %+v %v, want UTC", r, err)
	}
	refused := []struct {
		q    *v1alpha1.Quota
		want string
	}{
		{&v1alpha1.Quota{Limit: 5, Period: v1alpha1.QuotaDay, TimeZone: "Europe/Atlantis"}, "spec.quota.timeZone"},
		{&v1alpha1.Quota{Limit: 5, Period: v1alpha1.QuotaDay, TimeZone: "Local"}, "spec.quota.timeZone"},
		{&v1alpha1.Quota{Limit: 5, Period: "Year"}, "spec.quota.period"},
		{&v1alpha1.Quota{Limit: 0, Period: v1alpha1.QuotaDay}, "spec.quota.limit"},
	}
	for _, c := range refused {
		if _, err := FromSpec(spec(c.q), "ns/q"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", c.q, err, c.want)
		}
	}
	bad := []Rule{
		{QuotaLimit: 5},                         // a limit without a period
		{QuotaLimit: 5, QuotaPeriod: 9},         // unknown period
		{QuotaLimit: -1, QuotaPeriod: QuotaDay}, // negative
		{QuotaLimit: 5, QuotaPeriod: QuotaDay, QuotaZone: "../../etc/passwd"},
		{QuotaLimit: 5, QuotaPeriod: QuotaDay, QuotaZone: ""},
	}
	for _, b := range bad {
		base := Rule{Tenant: "t", Route: "r", Capacity: 1, RefillTokens: 1, RefillPeriodMs: 1000}
		base.QuotaLimit, base.QuotaPeriod, base.QuotaZone = b.QuotaLimit, b.QuotaPeriod, b.QuotaZone
		if err := base.Validate(); err == nil {
			t.Errorf("%+v validated", base)
		}
	}
}

// BenchmarkPeriodAt: the cost of the periods a quota decision computes (the
// gateway calls PeriodAt twice per decision of a rule with a quota).
func BenchmarkPeriodAt(b *testing.B) {
	loc, err := LoadZone("Europe/Paris")
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 6, 15, 12, 0, 0, 0, time.UTC)
	for _, p := range []QuotaPeriod{QuotaDay, QuotaMonth} {
		b.Run(p.String(), func(b *testing.B) {
			for b.Loop() {
				PeriodAt(p, loc, at)
			}
		})
	}
}
