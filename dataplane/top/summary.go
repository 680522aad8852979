package top

import "container/heap"

// Key is a tenant on a route.
type Key struct {
	Tenant string `json:"tenant"`
	Route  string `json:"route"`
}

// summary is the space-saving summary (Metwally, Agrawal and El Abbadi,
// 2005) of one slot's rejections: at most k counters. A key seen while
// fewer than k are in use gets a counter of its own; a new key when all k
// are in use takes over the counter with the smallest count, inheriting
// that count as its possible overestimate. Each counter's count is
// therefore at least its key's true count and at most err more, and err
// never exceeds n/k for n rejections counted: any key refused more than
// n/k times holds a counter. Not safe for concurrent use (Tracker locks).
type summary struct {
	k        int
	counters map[Key]*counter
	byCount  minHeap
	// rejections and admissions count every decision of the slot, exactly.
	rejections, admissions int64
}

// counter is one tracked key.
type counter struct {
	key Key
	// count is the key's rejections, an overestimate by at most err.
	count, err int64
	// admitted counts the key's admissions while it held this counter.
	admitted int64
	index    int // in byCount
}

func newSummary(k int) *summary {
	return &summary{k: k, counters: make(map[Key]*counter, k), byCount: make(minHeap, 0, k)}
}

// reject counts one rejection of key.
func (s *summary) reject(key Key) {
	s.rejections++
	if c := s.counters[key]; c != nil {
		c.count++
		heap.Fix(&s.byCount, c.index)
		return
	}
	if len(s.byCount) < s.k {
		c := &counter{key: key, count: 1}
		s.counters[key] = c
		heap.Push(&s.byCount, c)
		return
	}
	c := s.byCount[0]
	delete(s.counters, c.key)
	c.key, c.err, c.admitted = key, c.count, 0
	c.count++
	s.counters[key] = c
	heap.Fix(&s.byCount, 0)
}

// admit counts one admission of key: an exact total, and the key's own
// count when it is tracked.
func (s *summary) admit(key Key) {
	s.admissions++
	if c := s.counters[key]; c != nil {
		c.admitted++
	}
}

// floor is the most rejections a key without a counter can have had: the
// smallest count once all k counters are in use, else 0.
func (s *summary) floor() int64 {
	if len(s.byCount) < s.k {
		return 0
	}
	return s.byCount[0].count
}

// minHeap orders counters by count, smallest first.
type minHeap []*counter

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *minHeap) Push(x any) {
	c := x.(*counter)
	c.index = len(*h)
	*h = append(*h, c)
}
func (h *minHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
