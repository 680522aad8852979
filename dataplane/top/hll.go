package top

import (
	"encoding/base64"
	"fmt"
	"math"
	"math/bits"
)

// hllPrecision gives 2^12 = 4,096 one-byte registers: 4 KiB per slot, a
// standard error of 1.04/sqrt(4096) = 1.6% on a distinct count.
const (
	hllPrecision = 12
	hllRegisters = 1 << hllPrecision
)

// hll is a HyperLogLog (Flajolet, Fusy, Gandouet and Meunier, 2007) of
// the tenants refused: a distinct count in fixed memory. Its hash is the
// same in every process (FNV-1a, then a 64-bit finalizer), so the
// registers of several gateways merge by taking the maximum of each.
type hll [hllRegisters]uint8

// add counts s.
func (h *hll) add(s string) {
	x := hash64(s)
	i := x >> (64 - hllPrecision)
	// The rank of the first 1 bit after the index bits; the sentinel bit
	// bounds it at 64 - precision + 1.
	w := x<<hllPrecision | 1<<(hllPrecision-1)
	if r := uint8(bits.LeadingZeros64(w) + 1); r > h[i] {
		h[i] = r
	}
}

// merge takes the maximum of each register of o.
func (h *hll) merge(o *hll) {
	for i, r := range o {
		if r > h[i] {
			h[i] = r
		}
	}
}

// estimate is the distinct count: the harmonic mean of the registers,
// with linear counting for small counts (below 2.5 x registers, while
// some register is still zero).
func (h *hll) estimate() float64 {
	const m = float64(hllRegisters)
	sum, zeros := 0.0, 0
	for _, r := range h {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return e
}

// encode is the registers in base64, for /debug/top.
func (h *hll) encode() string { return base64.StdEncoding.EncodeToString(h[:]) }

// decodeHLL reads registers that encode wrote.
func decodeHLL(s string) (*hll, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != hllRegisters {
		return nil, fmt.Errorf("refusedTenantsSketch: want %d registers in base64", hllRegisters)
	}
	var h hll
	for i, r := range b {
		if r > 64-hllPrecision+1 {
			return nil, fmt.Errorf("refusedTenantsSketch: register %d holds %d, more than %d", i, r, 64-hllPrecision+1)
		}
		h[i] = r
	}
	return &h, nil
}

// hash64 is FNV-1a of s, finalized (MurmurHash3's fmix64) so that every
// bit depends on every input bit, as the register index and rank need.
func hash64(s string) uint64 {
	x := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		x ^= uint64(s[i])
		x *= 1099511628211
	}
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}
