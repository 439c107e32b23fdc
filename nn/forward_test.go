package nn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
)

// run evaluates the graph once and returns out's values as float64.
func run(t *testing.T, b *Builder, out *G.Node) []float64 {
	t.Helper()
	m := G.NewTapeMachine(b.G)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	switch d := out.Value().Data().(type) {
	case []float64:
		return d
	case []float32:
		r := make([]float64, len(d))
		for i, v := range d {
			r[i] = float64(v)
		}
		return r
	}
	return []float64{scalarOf(out.Value())}
}

func data(n *G.Node) []float64 { return n.Value().Data().([]float64) }

func assertClose(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol*(1+math.Abs(want[i])) {
			t.Fatalf("%s[%d] = %.12g, want %.12g", name, i, got[i], want[i])
		}
	}
}

// The forward references below are written from the definitions, one loop
// per formula, and share no code with the kernels.

func TestRMSNormForward(t *testing.T) {
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
	x := b.Param("x", []int{2, 3}, []float32{1, 2, 2, 0, 0, 3}, false)
	w := b.Param("w", []int{3}, []float32{1, 0.5, 2}, false)
	got := run(t, b, b.RMSNorm(x, w, 0))
	// row 1: mean square 3, row 2: mean square 3
	s := 1 / math.Sqrt(3)
	assertClose(t, "rmsnorm", got, []float64{1 * s, 0.5 * 2 * s, 2 * 2 * s, 0, 0, 2 * 3 * s}, 1e-15)
}

func TestRopeForward(t *testing.T) {
	const heads, hd, seq, theta = 2, 4, 3, 100.0
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
	rng := rand.New(rand.NewPCG(1, 1))
	x := randParam(b, rng, "x", 1, 2*seq, heads*hd)
	got := run(t, b, b.Rope(x, heads, hd, seq, theta))
	in := data(x)
	for r := 0; r < 2*seq; r++ {
		p := float64(r % seq)
		for h := 0; h < heads; h++ {
			for i := 0; i < hd/2; i++ {
				// the table is fp32 by design, whatever the graph's type
				ang := float64(float32(p) * (1 / float32(math.Pow(theta, float64(float32(2*i)/hd)))))
				x1, x2 := in[r*heads*hd+h*hd+i], in[r*heads*hd+h*hd+i+hd/2]
				// rotate_half: (x1, x2) -> (x1 cos − x2 sin, x2 cos + x1 sin)
				c, sn := float64(float32(math.Cos(ang))), float64(float32(math.Sin(ang)))
				want1 := x1*c - x2*sn
				want2 := x2*c + x1*sn
				assertClose(t, "rope", []float64{got[r*heads*hd+h*hd+i], got[r*heads*hd+h*hd+i+hd/2]}, []float64{want1, want2}, 1e-14)
			}
		}
	}
}

func TestAttentionForward(t *testing.T) {
	s := AttentionShape{Batch: 2, SeqLen: 5, Heads: 4, KVHeads: 2, HeadDim: 3}
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 3}, tensor.Float64)
	rng := rand.New(rand.NewPCG(2, 2))
	n := s.Batch * s.SeqLen
	q := randParam(b, rng, "q", 2, n, s.Heads*s.HeadDim)
	k := randParam(b, rng, "k", 2, n, s.KVHeads*s.HeadDim)
	v := randParam(b, rng, "v", 2, n, s.KVHeads*s.HeadDim)
	got := run(t, b, b.Attention(q, k, v, s))
	Q, K, V := data(q), data(k), data(v)
	qw, kw := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	want := make([]float64, len(got))
	for bi := 0; bi < s.Batch; bi++ {
		for h := 0; h < s.Heads; h++ {
			kh := h / (s.Heads / s.KVHeads)
			for i := 0; i < s.SeqLen; i++ {
				scores := make([]float64, i+1)
				var z float64
				for j := 0; j <= i; j++ {
					var dot float64
					for d := 0; d < s.HeadDim; d++ {
						dot += Q[(bi*s.SeqLen+i)*qw+h*s.HeadDim+d] * K[(bi*s.SeqLen+j)*kw+kh*s.HeadDim+d]
					}
					scores[j] = math.Exp(dot / math.Sqrt(float64(s.HeadDim)))
					z += scores[j]
				}
				for d := 0; d < s.HeadDim; d++ {
					var o float64
					for j := 0; j <= i; j++ {
						o += scores[j] / z * V[(bi*s.SeqLen+j)*kw+kh*s.HeadDim+d]
					}
					want[(bi*s.SeqLen+i)*qw+h*s.HeadDim+d] = o
				}
			}
		}
	}
	assertClose(t, "attention", got, want, 1e-13)
}

func TestSwiGLUAndCrossEntropyForward(t *testing.T) {
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
	a := b.Param("a", []int{1, 3}, []float32{-2, 0, 3}, false)
	u := b.Param("u", []int{1, 3}, []float32{1, 5, -1}, false)
	got := run(t, b, b.SwiGLU(a, u))
	silu := func(x float64) float64 { return x / (1 + math.Exp(-x)) }
	assertClose(t, "swiglu", got, []float64{silu(-2), 0, -silu(3)}, 1e-15)

	b = NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
	logits := b.Param("logits", []int{3, 3}, []float32{1, 2, 3, 0, 0, 0, 5, -5, 0}, false)
	targets := intInput(b, "targets", []int{2, IgnoreIndex, 0})
	loss := run(t, b, b.CrossEntropy(logits, targets))
	lse := func(xs ...float64) float64 {
		var s float64
		for _, x := range xs {
			s += math.Exp(x)
		}
		return math.Log(s)
	}
	want := ((lse(1, 2, 3) - 3) + (lse(5, -5, 0) - 5)) / 2
	assertClose(t, "cross-entropy", loss, []float64{want}, 1e-15)
}

func TestLinearAndEmbeddingForward(t *testing.T) {
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
	x := b.Param("x", []int{2, 3}, []float32{1, 2, 3, 4, 5, 6}, false)
	w := b.Param("w", []int{2, 3}, []float32{1, 0, -1, 0.5, 0.5, 0.5}, false)
	assertClose(t, "linear", run(t, b, b.Linear(x, w)), []float64{-2, 3, -2, 7.5}, 0)

	b = NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
	table := b.Param("table", []int{3, 2}, []float32{1, 2, 3, 4, 5, 6}, false)
	ids := intInput(b, "ids", []int{2, 0, 2})
	assertClose(t, "embedding", run(t, b, b.Embedding(ids, table)), []float64{5, 6, 1, 2, 5, 6}, 0)

	b = NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
	table = b.Param("table", []int{3, 2}, []float32{1, 2, 3, 4, 5, 6}, false)
	ids = intInput(b, "ids", []int{1, 3})
	b.Embedding(ids, table)
	m := G.NewTapeMachine(b.G)
	defer m.Close()
	err := m.RunAll()
	if err == nil || !strings.Contains(err.Error(), "token id 3 at position 1 is outside the vocabulary (size 3)") {
		t.Fatalf("an id outside the vocabulary: error %v", err)
	}
}

func TestExpf(t *testing.T) {
	worst := 0.0
	for x := float32(-104); x < 89; x += 0.0137 {
		got, want := float64(expf(x)), math.Exp(float64(x))
		if want == 0 || math.IsInf(want, 0) {
			continue
		}
		ulp := math.Abs(got-want) / (math.Abs(float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want))))
		if want > 1.2e-38 { // normal range: ulp-accurate
			worst = max(worst, ulp)
		} else if math.Abs(got-want) > 2e-45 {
			t.Fatalf("expf(%g) = %g, want %g (subnormal)", x, got, want)
		}
	}
	if worst > 2 {
		t.Fatalf("expf is off by %.2f ulp", worst)
	}
	if expf(100) != float32(math.Inf(1)) || expf(-200) != 0 || expf(0) != 1 {
		t.Fatal("expf limits wrong")
	}
	if nan := expf(float32(math.NaN())); nan == nan {
		t.Fatal("expf(NaN) is not NaN")
	}
}
