package regionshares

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The demand ring, as lua/token_bucket.lua writes it: the hash
// rd:{<tag>}:<rule>@<region>, its fields "0".."n-1" one window each,
// "<window>:<admitted>:<refused>:<share>", "w", the window in ms, and
// "n", the number of windows.

// KeyPrefix starts every demand ring's key; a SCAN of KeyPrefix+"*"
// finds them all.
const KeyPrefix = "rd:{"

// DemandKey is the ring of rule ("namespace/name") in region under the
// hash tag tag (a bucket's: the ring shares its Redis Cluster slot).
func DemandKey(tag, rule, region string) string {
	return KeyPrefix + tag + "}:" + rule + "@" + region
}

// ParseKey returns the rule and region of a ring's key, and false for a
// key that is not one.
func ParseKey(key string) (rule, region string, ok bool) {
	if !strings.HasPrefix(key, KeyPrefix) {
		return "", "", false
	}
	i := strings.Index(key, "}:")
	if i < 0 {
		return "", "", false
	}
	rest := key[i+2:]
	at := strings.LastIndexByte(rest, '@')
	if at <= 0 || at == len(rest)-1 {
		return "", "", false
	}
	return rest[:at], rest[at+1:], true
}

// Window is one window of a ring: number Index (Redis time / window
// length), tokens Admitted and Refused in it, and the largest share in
// force its calls were decided under.
type Window struct {
	Index             int64
	Admitted, Refused float64
	Share             int32
}

// Ring is one ring's windows (any order), their length and how many the
// ring holds (0: unknown).
type Ring struct {
	Window  time.Duration
	Slots   int64
	Windows []Window
}

// ParseRing reads a ring's hash (HGETALL). Fields it does not know are
// errors; so is a ring without its window length.
func ParseRing(fields map[string]string) (Ring, error) {
	var r Ring
	for k, v := range fields {
		if k == "n" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return Ring{}, fmt.Errorf("demand ring: slots %q", v)
			}
			r.Slots = n
			continue
		}
		if k == "w" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil || ms <= 0 {
				return Ring{}, fmt.Errorf("demand ring: window %q", v)
			}
			r.Window = time.Duration(ms) * time.Millisecond
			continue
		}
		if _, err := strconv.Atoi(k); err != nil {
			return Ring{}, fmt.Errorf("demand ring: field %q", k)
		}
		w, err := parseWindow(v)
		if err != nil {
			return Ring{}, err
		}
		r.Windows = append(r.Windows, w)
	}
	if r.Window <= 0 {
		return Ring{}, fmt.Errorf("demand ring: no window length")
	}
	return r, nil
}

func parseWindow(v string) (Window, error) {
	parts := strings.Split(v, ":")
	if len(parts) != 4 {
		return Window{}, fmt.Errorf("demand ring: window %q", v)
	}
	var w Window
	var err [4]error
	w.Index, err[0] = strconv.ParseInt(parts[0], 10, 64)
	w.Admitted, err[1] = strconv.ParseFloat(parts[1], 64)
	w.Refused, err[2] = strconv.ParseFloat(parts[2], 64)
	share, e := strconv.ParseInt(parts[3], 10, 32)
	w.Share, err[3] = int32(share), e
	for _, e := range err {
		if e != nil {
			return Window{}, fmt.Errorf("demand ring: window %q", v)
		}
	}
	return w, nil
}

// Reading is what one region's rings of one rule say over an interval.
type Reading struct {
	// Tokens asked for (admitted and refused) in the complete windows that
	// ended within the interval, and the time they cover.
	Asked float64
	Span  time.Duration
	// MaxShare is the largest share of the complete windows of the
	// interval that began at or after the change's since (0: none): once
	// every gateway of the region decides under the lowered share, the
	// next interval's windows say so.
	MaxShare int32
	// Rings is the number of rings read (0: the region reports nothing).
	Rings int
}

// Add folds ring into the reading for the interval that ends at now
// (Redis's time) and lasts interval; since is the change's first step (zero:
// none). Only complete windows count: the current one is still filling.
// The rings of one rule (one per bucket tag) add up; their windows line
// up, being numbered from Redis's clock.
func (rd *Reading) Add(ring Ring, now time.Time, interval time.Duration, since time.Time) {
	wms := ring.Window.Milliseconds()
	current := now.UnixMilli() / wms
	first := (now.Add(-interval).UnixMilli() + wms - 1) / wms // the first window that began within the interval
	first = min(first, current-1)                             // at least one window, for intervals shorter than it
	if ring.Slots > 1 {
		// An interval longer than the ring: the windows it still holds.
		first = max(first, current-ring.Slots+1)
	}
	span := time.Duration(current-first) * ring.Window
	rd.Span = max(rd.Span, span)
	rd.Rings++
	for _, w := range ring.Windows {
		if w.Index >= first && w.Index < current {
			rd.Asked += w.Admitted + w.Refused
		}
		if !since.IsZero() && w.Index >= first && w.Index < current && w.Index*wms >= since.UnixMilli() {
			rd.MaxShare = max(rd.MaxShare, w.Share)
		}
	}
}

// Observation is the reading as Step takes it: heard when a ring exists
// (an interval without tokens is a demand of 0, not silence: traffic comes
// in bursts), the rate over the span.
func (rd *Reading) Observation() Observation {
	o := Observation{Reachable: true, MaxShare: rd.MaxShare, Heard: rd.Rings > 0}
	if rd.Span > 0 {
		o.Rate = rd.Asked / rd.Span.Seconds()
	}
	return o
}
