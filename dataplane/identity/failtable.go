package identity

// failKey is a client address or prefix as 16 bytes (IPv4 as IPv4-mapped
// IPv6): no pointer, so the tables' maps are not scanned by the collector.
type failKey [16]byte

// failEntry is the failure bucket of one key: tokens left at its last
// failure, at (nanoseconds since the limiter's start), and its neighbours
// in the table's recency list.
type failEntry struct {
	key        failKey
	tokens     float64
	at         int64
	prev, next int32 // -1 ends the list
}

// failTable holds at most max buckets with a list ordered by last failure,
// most recent first: the least recent failure is the first to leave. Its
// memory is one map slot and one entry per bucket, released when the table
// empties. Not safe for concurrent use (the limiter's mutex guards it).
type failTable struct {
	max        int
	index      map[failKey]int32
	entries    []failEntry
	free       int32 // a free slot of entries, chained through next; -1 none
	head, tail int32 // most and least recent failure; -1 when empty
}

func newFailTable(max int) failTable {
	return failTable{max: max, free: -1, head: -1, tail: -1}
}

func (t *failTable) len() int   { return len(t.index) }
func (t *failTable) full() bool { return len(t.index) >= t.max }

// get returns the slot of key.
func (t *failTable) get(key failKey) (int32, bool) {
	i, ok := t.index[key]
	return i, ok
}

// insert adds key as the most recent failure; the caller made room.
func (t *failTable) insert(key failKey, tokens float64, at int64) {
	if t.index == nil {
		t.index = map[failKey]int32{}
	}
	e := failEntry{key: key, tokens: tokens, at: at, prev: -1, next: -1}
	i := t.free
	if i >= 0 {
		t.free = t.entries[i].next
		t.entries[i] = e
	} else {
		i = int32(len(t.entries))
		t.entries = append(t.entries, e)
	}
	t.index[key] = i
	t.pushFront(i)
}

// update sets slot i's bucket at a failure and makes it the most recent.
func (t *failTable) update(i int32, tokens float64, at int64) {
	t.entries[i].tokens, t.entries[i].at = tokens, at
	if t.head != i {
		t.unlink(i)
		t.pushFront(i)
	}
}

// remove forgets slot i; the table's memory goes when it is empty.
func (t *failTable) remove(i int32) {
	t.unlink(i)
	delete(t.index, t.entries[i].key)
	if len(t.index) == 0 {
		*t = newFailTable(t.max)
		return
	}
	t.entries[i] = failEntry{next: t.free}
	t.free = i
}

func (t *failTable) pushFront(i int32) {
	t.entries[i].prev, t.entries[i].next = -1, t.head
	if t.head >= 0 {
		t.entries[t.head].prev = i
	}
	t.head = i
	if t.tail < 0 {
		t.tail = i
	}
}

func (t *failTable) unlink(i int32) {
	e := &t.entries[i]
	if e.prev >= 0 {
		t.entries[e.prev].next = e.next
	} else {
		t.head = e.next
	}
	if e.next >= 0 {
		t.entries[e.next].prev = e.prev
	} else {
		t.tail = e.prev
	}
}
