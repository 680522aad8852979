package proxy

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/tollgate-dev/tollgate/pkg/clip"
	"github.com/tollgate-dev/tollgate/pkg/snapshot"
)

// requestCost is the cost of r under c (spec.cost.request): the fixed
// cost, or the value of the cost header, whole and from 1 to the rule's
// max; without the header, the rule's default. The error, for a 400, names
// the header and quotes (clipped) what it held.
func requestCost(r *http.Request, c *snapshot.Cost) (int64, error) {
	if c == nil {
		return 1, nil
	}
	if c.Header == "" {
		return c.RequestDefault(), nil
	}
	vals := r.Header.Values(c.Header)
	switch len(vals) {
	case 0:
		return c.RequestDefault(), nil
	case 1:
	default:
		return 0, fmt.Errorf("%s header: given %d times, want it once", c.Header, len(vals))
	}
	v, limit := vals[0], c.RequestMax()
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || !digits(v) || n < 1 || n > limit {
		return 0, fmt.Errorf("%s header: %q is not a whole number from 1 to %d", c.Header, clip.String(v), limit)
	}
	return n, nil
}

// digits reports whether s is one or more ASCII digits (ParseInt also takes
// a sign).
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
