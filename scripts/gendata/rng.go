package main

import "math/bits"

// rng is a small SplitMix64 generator. It is written out here rather than
// taken from math/rand so that the generated files depend only on the seed,
// never on the Go release that runs this program.
type rng struct{ s uint64 }

// newRNG returns a generator for one named stream of the seed, so that the
// corpus and the task splits do not shift when the other changes size.
func newRNG(seed uint64, stream string) *rng {
	h := uint64(14695981039346656037) // FNV-1a of the stream name
	for i := 0; i < len(stream); i++ {
		h ^= uint64(stream[i])
		h *= 1099511628211
	}
	r := &rng{s: seed*0x9E3779B97F4A7C15 ^ h}
	r.next()
	return r
}

func (r *rng) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// intn returns a number in [0, n). n must be positive.
func (r *rng) intn(n int) int {
	if n <= 0 {
		panic("intn: n <= 0")
	}
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// between returns a number in [lo, hi].
func (r *rng) between(lo, hi int) int { return lo + r.intn(hi-lo+1) }

// chance reports true with probability p.
func (r *rng) chance(p float64) bool {
	return float64(r.next()>>11)/(1<<53) < p
}

// shuffle permutes n items with Fisher-Yates.
func (r *rng) shuffle(n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		swap(i, r.intn(i+1))
	}
}

func pick[T any](r *rng, xs []T) T { return xs[r.intn(len(xs))] }

// pickN returns n distinct items of xs in random order (n <= len(xs)).
func pickN[T any](r *rng, xs []T, n int) []T {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	out := make([]T, 0, n)
	for i := 0; i < n; i++ {
		j := i + r.intn(len(idx)-i)
		idx[i], idx[j] = idx[j], idx[i]
		out = append(out, xs[idx[i]])
	}
	return out
}
