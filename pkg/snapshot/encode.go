package snapshot

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// appendRule appends r as JSON, with the same field names and omitempty
// behaviour as Rule's struct tags (decoding uses encoding/json).
func appendRule(b []byte, r *Rule) []byte {
	b = append(b, `{"t":`...)
	b = appendString(b, r.Tenant)
	b = append(b, `,"r":`...)
	b = appendString(b, r.Route)
	b = append(b, `,"c":`...)
	b = strconv.AppendInt(b, r.Capacity, 10)
	b = append(b, `,"n":`...)
	b = strconv.AppendInt(b, r.RefillTokens, 10)
	b = append(b, `,"p":`...)
	b = strconv.AppendInt(b, r.RefillPeriodMs, 10)
	if r.Shadow {
		b = append(b, `,"sh":true`...)
	}
	if r.FailureMode != 0 {
		b = append(b, `,"f":`...)
		b = strconv.AppendUint(b, uint64(r.FailureMode), 10)
	}
	for _, f := range [...]struct {
		name string
		v    int64
	}{{"pm", int64(r.Prefetch)}, {"pb", int64(r.Batch)}, {"pe", int64(r.ErrorBudgetPercent)}, {"k", int64(r.Shards)}} {
		if f.v != 0 {
			b = append(b, ',', '"')
			b = append(b, f.name...)
			b = append(b, '"', ':')
			b = strconv.AppendInt(b, f.v, 10)
		}
	}
	if len(r.Regions) > 0 {
		b = append(b, `,"rg":[`...)
		for i, g := range r.Regions {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"n":`...)
			b = appendString(b, g.Name)
			b = append(b, `,"p":`...)
			b = strconv.AppendInt(b, int64(g.Percent), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.RegionsFixed {
		b = append(b, `,"rf":true`...)
	}
	b = appendIntField(b, "mi", int64(r.MaxInFlight))
	b = appendIntField(b, "mil", r.MaxInFlightLeaseMs)
	if r.Cost != nil {
		// Rare (rules with spec.cost), small and of plain fields:
		// encoding/json cannot fail on it.
		c, _ := json.Marshal(r.Cost)
		b = append(b, `,"co":`...)
		b = append(b, c...)
	}
	b = appendQuota(b, r)
	b = appendClaims(b, r.Claims)
	b = appendKeyParts(b, r)
	return append(b, '}')
}

// appendKeyParts appends r's "by", "sd" and "s" fields, when set.
func appendKeyParts(b []byte, r *Rule) []byte {
	if len(r.By) > 0 {
		// Rare (rules with spec.by) and of plain fields: encoding/json
		// cannot fail on it.
		by, _ := json.Marshal(r.By)
		b = append(b, `,"by":`...)
		b = append(b, by...)
	}
	if r.Shared {
		b = append(b, `,"sd":true`...)
	}
	if r.Source != "" {
		b = append(b, `,"s":`...)
		b = appendString(b, r.Source)
	}
	return b
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// appendIntField appends the field name with value v, or nothing when v is
// 0 (as omitempty does).
func appendIntField(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

// appendQuota appends r's quota fields (ql, qp, qz), each when set.
func appendQuota(b []byte, r *Rule) []byte {
	b = appendIntField(b, "ql", r.QuotaLimit)
	b = appendIntField(b, "qp", int64(r.QuotaPeriod))
	if r.QuotaZone != "" {
		b = append(b, `,"qz":`...)
		b = appendString(b, r.QuotaZone)
	}
	return b
}

// appendClaims appends the "cl" field of claims, when there are any.
func appendClaims(b []byte, claims []ClaimMatch) []byte {
	if len(claims) == 0 {
		return b
	}
	b = append(b, `,"cl":[`...)
	for i, c := range claims {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"k":`...)
		b = appendString(b, c.Path)
		b = append(b, `,"v":`...)
		b = appendString(b, c.Value)
		b = append(b, '}')
	}
	return append(b, ']')
}
