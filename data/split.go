package data

import (
	"errors"
	"fmt"
	"math"
)

// Split deterministically shuffles ex (from seed) and puts the last
// ceil(frac*n) examples in val, the rest in train. val gets at least one
// example whenever frac > 0. It is an error if frac is not in [0, 1) or if
// the train side would be empty.
//
// ex is not modified; train and val share one new backing array (capped, so
// that appending to train cannot overwrite val) and share the examples' IDs
// and Target slices with ex.
func Split(ex []Example, frac float64, seed uint64) (train, val []Example, err error) {
	if !(frac >= 0 && frac < 1) { // also catches NaN
		return nil, nil, fmt.Errorf("data: validation fraction %v is not in [0, 1)", frac)
	}
	n := len(ex)
	if n == 0 {
		return nil, nil, errors.New("data: split: no examples")
	}
	nval := valCount(n, frac)
	if nval >= n {
		return nil, nil, fmt.Errorf("data: validation fraction %v leaves no training examples (n = %d)", frac, n)
	}
	perm := permutation(n, seed, splitmix64(splitSalt))
	all := make([]Example, n)
	for i, j := range perm {
		all[i] = ex[j]
	}
	ntrain := n - nval
	train = all[:ntrain:ntrain]
	if nval > 0 {
		val = all[ntrain:]
	}
	return train, val, nil
}

// valCount is ceil(frac*n), at least 1 when frac > 0. A product within 1e-9
// of an integer counts as that integer: 0.7*10 is 7.000000000000001 in
// float64, and a user asking for 70% of 10 expects 7, not 8.
func valCount(n int, frac float64) int {
	x := frac * float64(n)
	k := math.Ceil(x)
	if r := math.Round(x); math.Abs(x-r) < 1e-9 {
		k = r
	}
	if frac > 0 && k < 1 {
		k = 1
	}
	return int(k)
}
