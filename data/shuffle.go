package data

import (
	"math/bits"
	"math/rand/v2"
)

// Salts that keep the split order and the per-epoch loader orders on
// unrelated PCG streams, so that the examples that open epoch 0 are not the
// ones that were drawn first into training by Split.
const (
	splitSalt  = 0x6d69787475_6e6531 // "mixtune1"
	loaderSalt = 0x6c6f61646572_3031 // "loader01"
)

// splitmix64 is a bijective 64-bit mixer. It turns consecutive epoch numbers
// into unrelated PCG stream words.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// permutation returns a uniformly random permutation of 0..n-1 drawn from
// rand.NewPCG(seed, stream).
//
// It uses its own Fisher–Yates shuffle and bounded draw instead of
// rand.Rand.Shuffle: checkpoints record only (epoch, step), so the order must
// stay a pure function of (seed, epoch) across Go releases, and only the PCG
// generator itself, not the helpers built on it, is a fixed algorithm.
func permutation(n int, seed, stream uint64) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	src := rand.NewPCG(seed, stream)
	for i := n - 1; i > 0; i-- {
		j := int(bounded(src, uint64(i+1)))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// bounded returns a uniform value in [0, n), n > 0, by Lemire's
// multiply-and-reject method.
func bounded(src *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(src.Uint64(), n)
		}
	}
	return hi
}
