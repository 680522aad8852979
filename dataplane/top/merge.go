package top

import "fmt"

// Merge adds up the reports of several gateways (`tollgate top`). A pair's
// counts are the sum of those of the gateways that list it, plus, for each
// gateway that does not, that gateway's Floor, to Rejections and to Error:
// it may have refused the pair that many times. The bound of the package
// comment holds for the merged report with R the rejections of all the
// gateways. The refused tenants are the union of the gateways' sketches.
// Entries are limited as by Tracker.Report; their Rule is the first
// gateway's that has one.
func Merge(reports []Report, limit int) (Report, error) {
	m := newMerger()
	for i, r := range reports {
		m.out.WindowSeconds = max(m.out.WindowSeconds, r.WindowSeconds)
		m.out.K = max(m.out.K, r.K)
		if r.RefusedTenantsSketch != "" {
			h, err := decodeHLL(r.RefusedTenantsSketch)
			if err != nil {
				return Report{}, fmt.Errorf("report %d: %w", i+1, err)
			}
			m.tenants.merge(h)
		}
		for _, e := range r.Entries {
			if e.Rejections < 0 || e.Error < 0 || e.Error > e.Rejections || e.Admissions < 0 {
				return Report{}, fmt.Errorf("report %d: entry %s/%s: counts out of range", i+1, e.Tenant, e.Route)
			}
			m.entry(e, r.Floor)
		}
		m.part(r.Rejections, r.Admissions, r.Floor)
	}
	return m.finish(limit), nil
}

// merger adds up parts (the slots of a Tracker, or the reports of
// gateways), each with its own floor.
type merger struct {
	out     Report
	acc     map[Key]*Entry
	present map[Key]int64 // the floors of the parts that list the key
	tenants hll
}

func newMerger() *merger {
	return &merger{acc: map[Key]*Entry{}, present: map[Key]int64{}}
}

// entry adds e, listed by a part whose floor is floor.
func (m *merger) entry(e Entry, floor int64) {
	a := m.acc[e.Key]
	if a == nil {
		a = &Entry{Key: e.Key}
		m.acc[e.Key] = a
	}
	a.Rejections += e.Rejections
	a.Error += e.Error
	a.Admissions += e.Admissions
	if a.Rule == nil {
		a.Rule = e.Rule
	}
	m.present[e.Key] += floor
}

// part adds a part's totals, after its entries.
func (m *merger) part(rejections, admissions, floor int64) {
	m.out.Rejections += rejections
	m.out.Admissions += admissions
	m.out.Floor += floor
}

// finish adds, to each pair, the floors of the parts that do not list it
// (it may have been refused that many times there), and cuts the entries
// to limit.
func (m *merger) finish(limit int) Report {
	out := m.out
	for k, e := range m.acc {
		e.Rejections += out.Floor - m.present[k]
		e.Error += out.Floor - m.present[k]
		out.Entries = append(out.Entries, *e)
	}
	out.RefusedTenants, out.RefusedTenantsSketch = m.tenants.estimate(), m.tenants.encode()
	out.cut(limit)
	return out
}
