package vkengine

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
)

// TestDecodeCacheGrows: a decoding graph (rotations at each row's
// position, two layers of attention through the cache, the head's rows
// picked) gives the same bits whether the device cache was made large
// enough at once (KVCache.Reserve) or grows as the sequences do, copying
// what it held, and when a sequence joins after the first runs (the
// slots grow too). The cache's layout changes with its capacity; no sum
// does. Each run's rows are fed the CPU engine's op too, and the two
// agree within 1e-5 of the largest output (a sanity check: the kernel's
// bound is TestCacheAttention's). The program's memory is planned and
// poisoned, so a value read after its buffer was handed on is NaN.
func TestDecodeCacheGrows(t *testing.T) {
	e := openEngine(t)
	const (
		H, KVH, D, T = 4, 2, 16, 40
		qw, kw       = H * D, KVH * D
	)
	rng := rand.New(rand.NewPCG(5, 9))
	values := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	// every token's q, k and v, by sequence
	q, k, v := [3][]float32{}, [3][]float32{}, [3][]float32{}
	for s := range 3 {
		q[s], k[s], v[s] = values(T*qw), values(T*kw), values(T*kw)
	}
	runs := [][][2]int{{{0, 5}, {1, 2}}, {{0, 1}, {1, 1}}, {{2, 7}, {0, 1}}, {{1, 1}, {2, 1}, {0, 1}}, {{1, 20}, {2, 1}}, {{2, 1}}}
	decode := func(t *testing.T, reserve bool) [][]float32 {
		c := nn.NewKVCache(2, kw, nn.RopeInvFreq(D, 10000))
		c.Add()
		c.Add()
		if reserve {
			c.Reserve(T)
		}
		dc := NewDecodeCache(e, c)
		defer dc.Close()
		var outs [][]float32
		length := make([]int, 3)
		for ri, run := range runs {
			if ri == 2 {
				c.Add() // a third sequence joins
			}
			var seqs, last []int
			var qr, kr, vr []float32
			for _, sn := range run {
				s := sn[0]
				for range sn[1] {
					p := length[s]
					seqs = append(seqs, s)
					qr, kr, vr = append(qr, q[s][p*qw:(p+1)*qw]...), append(kr, k[s][p*kw:(p+1)*kw]...), append(vr, v[s][p*kw:(p+1)*kw]...)
					length[s]++
				}
				last = append(last, len(seqs)-1)
			}
			if err := c.SetRows(seqs); err != nil {
				t.Fatal(err)
			}
			rows := len(seqs)
			b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
			in := func(name string, w int, data []float32) *G.Node {
				n := b.Input(name, rows, w)
				if err := G.Let(n, tensor.New(tensor.WithShape(rows, w), tensor.WithBacking(data))); err != nil {
					t.Fatal(err)
				}
				return n
			}
			qn, kn, vn := in("q", qw, qr), in("k", kw, kr), in("v", kw, vr)
			qn, kn = b.RopeCached(qn, H, c), b.RopeCached(kn, KVH, c)
			x := qn
			for l := range 2 {
				x = b.Attention(x, kn, vn, nn.AttentionShape{Batch: rows, SeqLen: 1, Heads: H, KVHeads: KVH, HeadDim: D, Cache: c, Layer: l})
			}
			idx := G.NewVector(b.G, tensor.Int, G.WithShape(len(last)), G.WithName("last"))
			if err := G.Let(idx, tensor.New(tensor.WithShape(len(last)), tensor.WithBacking(last))); err != nil {
				t.Fatal(err)
			}
			out := b.Rows(x, idx)
			p, err := e.Compile(b.G, b.IsParam, WithCache(dc), PlanMemory(out), PoisonMemory())
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Run(nn.Pass{}); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, len(last)*qw)
			if err := p.Read(out, got); err != nil {
				t.Fatal(err)
			}
			p.Close()
			// the CPU engine on the same graph and cache bookkeeping
			diff, top := maxDiff(got, cpuValue(t, b, out))
			if !(diff <= 1e-5*top) {
				t.Fatalf("run %d: the device's outputs differ from the CPU's by %.3g (largest %.3g)", ri, diff, top)
			}
			outs = append(outs, got)
		}
		if reserve && dc.cap != T || !reserve && dc.cap == T {
			t.Errorf("reserve %v: the cache holds %d tokens a sequence", reserve, dc.cap)
		}
		return outs
	}
	reserved, grown := decode(t, true), decode(t, false)
	for ri := range reserved {
		for i := range reserved[ri] {
			if math.Float32bits(reserved[ri][i]) != math.Float32bits(grown[ri][i]) {
				t.Fatalf("run %d, value %d: %v with the cache reserved, %v grown", ri, i, reserved[ri][i], grown[ri][i])
			}
		}
	}
}

// TestDecodingSharesWeights: decoding that shares a training program's
// weights (NewDecoding with its Param) uploads none of them and reads them
// where they are: the logits of one that uploads its own copy of the same
// weights, bit for bit, until the training program's weights change, when
// only the sharing one follows. The one with its own copy uploads every
// weight once for all its graph shapes (a prompt, then token by token).
func TestDecodingSharesWeights(t *testing.T) {
	e := openEngine(t)
	m := testModels(t, 2)["qknorm-bias-window"]
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	g, _ := trainingGraph(t, b, m, false, 1)
	train, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer train.Close()
	decoder := func(dec *Decoding) *model.Decoder {
		d := model.NewDecoderWith(m, &nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, model.DecodeConfig{
			Device: func(logits *G.Node, b *nn.Builder, c *nn.KVCache) (model.DecodeProgram, error) {
				return dec.Compile(logits, b, c)
			}})
		t.Cleanup(d.Close)
		return d
	}
	logits := func(d *model.Decoder) [][]float32 {
		out, err := d.Logits([]int{3, 7, 1, 9, 4, 4, 0}, 3)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	same := func(a, b [][]float32) bool {
		for i := range a {
			for j := range a[i] {
				if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
					return false
				}
			}
		}
		return true
	}
	shared, own := NewDecoding(e, train.Param), NewDecoding(e, nil)
	t.Cleanup(shared.Close) // after the decoders' programs (cleanups run last first)
	t.Cleanup(own.Close)
	sd, od := decoder(shared), decoder(own)
	before, want := logits(sd), logits(od)
	if !same(before, want) {
		t.Fatal("decoding the training program's weights differs from decoding a copy of them")
	}
	bytes := int64(0)
	for _, w := range m.Weights {
		bytes += int64(4 * len(w.Data))
	}
	if shared.weights.Up != 0 || own.weights.Up != bytes {
		t.Errorf("weights uploaded: %d sharing, %d with a copy (the model's are %d bytes)", shared.weights.Up, own.weights.Up, bytes)
	}
	norm := g.Params["model.norm.weight"]
	for i, x := range norm.Value().Data().([]float32) {
		norm.Value().Data().([]float32)[i] = 2 * x
	}
	if err := train.SyncParams(b.Leaf(norm)); err != nil {
		t.Fatal(err)
	}
	if after := logits(sd); same(after, before) {
		t.Error("decoding that shares the training program's weights did not see them change")
	}
	if !same(logits(od), want) {
		t.Error("decoding with its own copy changed with the training program's weights")
	}
}

// cpuValue runs b's graph on the CPU engine and returns out's value.
func cpuValue(t *testing.T, b *nn.Builder, out *G.Node) []float32 {
	t.Helper()
	vm := nn.NewTapeMachine(b.Eng, b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	return out.Value().Data().([]float32)
}

// maxDiff is the largest |got − want| and the largest |want|.
func maxDiff(got, want []float32) (diff, top float64) {
	for i := range want {
		top, diff = max(top, math.Abs(float64(want[i]))), max(diff, math.Abs(float64(got[i]-want[i])))
	}
	return diff, top
}
