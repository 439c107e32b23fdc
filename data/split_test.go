package data

import (
	"math"
	"reflect"
	"slices"
	"testing"
)

// numbered returns n examples whose single distinguishing token is their index.
func numbered(n int) []Example {
	ex := make([]Example, n)
	for i := range ex {
		ex[i] = Example{IDs: []int{bos, i, eos}, Target: flags("ftt"), Line: i + 1}
	}
	return ex
}

// lines returns the Line of each example, which identifies it.
func lines(ex []Example) []int {
	out := make([]int, len(ex))
	for i, e := range ex {
		out[i] = e.Line
	}
	return out
}

func TestSplitSizes(t *testing.T) {
	tests := []struct {
		n          int
		frac       float64
		train, val int
	}{
		{10, 0, 10, 0},
		{10, 0.1, 9, 1},
		{10, 0.15, 8, 2},   // ceil(1.5)
		{100, 0.07, 93, 7}, // 0.07*100 is 7.000000000000001 in float64
		{3, 0.5, 1, 2},
		{2, 0.01, 1, 1},
		{100, 1e-12, 99, 1}, // at least one validation example
		{1000, 0.05, 950, 50},
		{1, 0, 1, 0},
	}
	for _, tt := range tests {
		train, val, err := Split(numbered(tt.n), tt.frac, 1)
		if err != nil {
			t.Errorf("Split(n=%d, %v): %v", tt.n, tt.frac, err)
			continue
		}
		if len(train) != tt.train || len(val) != tt.val {
			t.Errorf("Split(n=%d, %v) gave %d train, %d val; want %d, %d", tt.n, tt.frac, len(train), len(val), tt.train, tt.val)
		}
		all := slices.Sorted(slices.Values(append(lines(train), lines(val)...)))
		for i, l := range all {
			if l != i+1 {
				t.Errorf("Split(n=%d, %v) does not hold every example once: %v", tt.n, tt.frac, all)
				break
			}
		}
	}
}

func TestSplitErrors(t *testing.T) {
	tests := []struct {
		n    int
		frac float64
		want string
	}{
		{10, 1, "data: validation fraction 1 is not in [0, 1)"},
		{10, -0.1, "data: validation fraction -0.1 is not in [0, 1)"},
		{10, math.NaN(), "data: validation fraction NaN is not in [0, 1)"},
		{10, math.Inf(1), "data: validation fraction +Inf is not in [0, 1)"},
		{0, 0.1, "data: split: no examples"},
		{1, 0.5, "data: validation fraction 0.5 leaves no training examples (n = 1)"},
		{1, 1e-9, "data: validation fraction 1e-09 leaves no training examples (n = 1)"},
	}
	for _, tt := range tests {
		_, _, err := Split(numbered(tt.n), tt.frac, 1)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Split(n=%d, %v): error %v, want %s", tt.n, tt.frac, err, tt.want)
		}
	}
}

func TestSplitDeterminism(t *testing.T) {
	ex := numbered(50)
	orig := lines(ex)
	trainA, valA, _ := Split(ex, 0.2, 7)
	trainB, valB, _ := Split(ex, 0.2, 7)
	if !reflect.DeepEqual(lines(trainA), lines(trainB)) || !reflect.DeepEqual(lines(valA), lines(valB)) {
		t.Error("same seed gave different splits")
	}
	trainC, valC, _ := Split(ex, 0.2, 8)
	if reflect.DeepEqual(lines(valA), lines(valC)) && reflect.DeepEqual(lines(trainA), lines(trainC)) {
		t.Error("different seeds gave the same split")
	}
	if slices.Equal(lines(append(trainA, valA...)), orig) {
		t.Error("split did not shuffle")
	}
	if !slices.Equal(lines(ex), orig) {
		t.Error("Split modified its input")
	}
	// Appending to train must not overwrite val.
	v0 := valA[0].Line
	_ = append(trainA, Example{Line: -1})
	if valA[0].Line != v0 {
		t.Error("appending to train overwrote val")
	}
}

// TestPermutationUniform checks that every ordering of three elements is
// drawn about equally often, which a Fisher–Yates loop with a wrong bound
// would not do.
func TestPermutationUniform(t *testing.T) {
	const draws = 6000
	count := map[[3]int]int{}
	for s := range uint64(draws) {
		p := permutation(3, s, 1)
		count[[3]int(p)]++
	}
	if len(count) != 6 {
		t.Fatalf("drew %d distinct orderings of 3, want 6: %v", len(count), count)
	}
	for p, n := range count {
		if n < draws/6*8/10 || n > draws/6*12/10 {
			t.Errorf("ordering %v drawn %d times in %d, want about %d", p, n, draws, draws/6)
		}
	}
}
