package amp

import (
	"slices"
	"testing"
)

// A recipe's moves: each op must exist and be moved once; every refusal
// names its list and index, and Apply makes no move while any is refused.
func TestMoves(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Moves
		want []string // Check's errors
	}{
		{"none", Moves{}, nil},
		{"softmax to low", Moves{LowPrecision: []string{"softmax"}}, nil},
		{"unknown", Moves{FullPrecision: []string{"linear", "matmul"}}, []string{`fp32[1]: unknown op "matmul" (known: add, attention_scores, attention_values, cross_entropy, linear, rmsnorm, rope, silu, softmax)`}},
		{"twice", Moves{FullPrecision: []string{"linear"}, Promote: []string{"rope", "linear"}}, []string{`promote[1]: op "linear" is already moved to fp32`}},
		{"twice in one list", Moves{LowPrecision: []string{"silu", "silu"}}, []string{`low_precision[1]: op "silu" is already moved to low_precision`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range tc.m.Check() {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Check: %q, want %q", got, tc.want)
			}
			p, err := tc.m.Apply(DefaultPolicy(BF16))
			if (err != nil) != (len(tc.want) > 0) {
				t.Fatalf("Apply: %v", err)
			}
			if err == nil {
				if verr := p.Validate(); verr != nil {
					t.Fatal(verr)
				}
				for _, op := range tc.m.LowPrecision {
					if p.Class(op) != LowPrecision {
						t.Errorf("%s is %v after the move", op, p.Class(op))
					}
				}
			}
		})
	}
}
