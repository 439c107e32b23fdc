package model

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/safetensors"
)

// The fixture comes from scripts/gen_torch_llama_fixture.py: PyTorch's
// logits, loss and weight gradients for a tiny sharded checkpoint stored in
// mixed BF16/F16/F32.
const torchFixture = "testdata/torch_llama"

type torchExpected struct {
	f             *safetensors.File
	ids, targets  []int
	batch, seqLen int
}

func loadExpected(t *testing.T) torchExpected {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join(torchFixture, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	md := f.Metadata()
	e := torchExpected{f: f}
	if err := json.Unmarshal([]byte(md["input_ids"]), &e.ids); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(md["targets"]), &e.targets); err != nil {
		t.Fatal(err)
	}
	e.batch, _ = strconv.Atoi(md["batch"])
	e.seqLen, _ = strconv.Atoi(md["seq_len"])
	return e
}

// f64 reads an F64 tensor without narrowing it.
func (e torchExpected) f64(t *testing.T, name string) []float64 {
	t.Helper()
	raw, err := e.f.Raw(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(raw)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[i*8:]))
	}
	return out
}

// evaluate builds m in dtype dt and returns logits, loss and, if wantGrads,
// every weight's gradient.
func evaluate(t *testing.T, m *Model, dt tensor.Dtype, e torchExpected, wantGrads bool) ([]float64, float64, map[string][]float64) {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, dt)
	g, err := m.Build(b, GraphConfig{Batch: e.batch, SeqLen: e.seqLen, Trainable: func(string) bool { return wantGrads }})
	if err != nil {
		t.Fatal(err)
	}
	setBatch(t, g, e.ids, e.targets)
	names := []string{}
	var wrt []*G.Node
	for _, s := range Specs(m.Config) {
		names = append(names, s.Name)
		wrt = append(wrt, g.Params[s.Name])
	}
	var grads G.Nodes
	if wantGrads {
		if grads, err = G.Grad(g.Loss, wrt...); err != nil {
			t.Fatal(err)
		}
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	gr := map[string][]float64{}
	for i, n := range grads {
		gr[names[i]] = toF64(n.Value().Data())
	}
	return toF64(g.Logits.Value().Data()), toF64(g.Loss.Value().Data())[0], gr
}

func toF64(d any) []float64 {
	switch x := d.(type) {
	case []float64:
		return append([]float64(nil), x...)
	case []float32:
		r := make([]float64, len(x))
		for i, v := range x {
			r[i] = float64(v)
		}
		return r
	case float64:
		return []float64{x}
	case float32:
		return []float64{float64(x)}
	}
	panic("unexpected value type")
}

func maxRelErr(got, want []float64) float64 {
	var worst, scale float64
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for i := range want {
		worst = max(worst, math.Abs(got[i]-want[i])/max(scale, 1e-30))
	}
	return worst
}

func TestMatchesPyTorch(t *testing.T) {
	m, err := Load(torchFixture)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.StoredDtypes(); got != "BF16×3, F16×3, F32×15" {
		t.Errorf("stored dtypes %q", got)
	}
	e := loadExpected(t)

	logits, loss, grads := evaluate(t, m, tensor.Float64, e, true)
	// 1e-14: what the README states (measured: logits 9.2e-16, loss
	// 8.9e-16, gradients 2.1e-15).
	const tol = 1e-14
	rl := maxRelErr(logits, e.f64(t, "logits"))
	if rl > tol {
		t.Errorf("float64 logits differ from PyTorch by %.3g (relative to the largest)", rl)
	}
	want := e.f64(t, "loss")[0]
	if math.Abs(loss-want) > tol*want {
		t.Errorf("float64 loss %.17g, PyTorch %.17g", loss, want)
	}
	worst := 0.0
	for _, s := range Specs(m.Config) {
		r := maxRelErr(grads[s.Name], e.f64(t, "grad."+s.Name))
		worst = max(worst, r)
		if r > tol {
			t.Errorf("gradient of %s differs from PyTorch by %.3g", s.Name, r)
		}
	}
	t.Logf("float64: logits %.3g, loss %.3g (%.12f), worst gradient difference %.3g", rl, math.Abs(loss-want), loss, worst)

	logits32, loss32, _ := evaluate(t, m, tensor.Float32, e, false)
	want32, _, _ := e.f.Float32("logits_fp32")
	if r := maxRelErr(logits32, toF64(want32)); r > 2e-6 {
		t.Errorf("float32 logits differ from PyTorch fp32 by %.3g", r)
	}
	t.Logf("float32: loss %.7f (float64 %.7f)", loss32, loss)
}

func TestSaveLoadBitIdentical(t *testing.T) {
	m, err := Load(torchFixture)
	if err != nil {
		t.Fatal(err)
	}
	e := loadExpected(t)
	before, _, _ := evaluate(t, m, tensor.Float32, e, false)
	for _, tc := range []struct {
		dtype amp.Format
		shard int64
	}{{amp.FP32, 0}, {amp.FP32, 8 << 10}} {
		dir := t.TempDir()
		if err := m.Save(dir, tc.dtype, tc.shard); err != nil {
			t.Fatal(err)
		}
		m2, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		after, _, _ := evaluate(t, m2, tensor.Float32, e, false)
		for i := range before {
			if math.Float64bits(before[i]) != math.Float64bits(after[i]) {
				t.Fatalf("%v shard %d: logit %d changed after save/load: %v -> %v", tc.dtype, tc.shard, i, before[i], after[i])
			}
		}
	}
	// bf16: the reloaded model equals the original rounded to bf16.
	dir := t.TempDir()
	if err := m.Save(dir, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	m2, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range m.Weights {
		for i, v := range w.Data {
			if got := m2.Weights[name].Data[i]; got != amp.BF16.Round(v) {
				t.Fatalf("%s[%d]: bf16 reload %v, want %v", name, i, got, amp.BF16.Round(v))
			}
		}
	}
}

// The decoder's cached path must give the graph's logits at every
// position, whether a prefix arrives at once or token by token.
func TestDecoderMatchesGraph(t *testing.T) {
	m, err := Load(torchFixture)
	if err != nil {
		t.Fatal(err)
	}
	e := loadExpected(t)
	graph, _, _ := evaluate(t, m, tensor.Float32, e, false)
	V := m.Config.VocabSize
	d := NewDecoder(m, nil, blas.Gonum{})
	for row := 0; row < e.batch; row++ {
		ids := e.ids[row*e.seqLen : (row+1)*e.seqLen]
		for _, prefill := range []int{1, 3, e.seqLen} {
			d.cache.Reset()
			d.cache.Add()
			var got [][]float32
			for p := 0; p < e.seqLen; {
				n := 1
				if p == 0 {
					n = prefill
				}
				lg, err := d.feed(context.Background(), [][]int{ids[p : p+n]})
				if err != nil {
					t.Fatal(err)
				}
				for len(got) < p+n-1 {
					got = append(got, nil) // positions inside a prefill have no logits
				}
				got = append(got, lg[0])
				p += n
			}
			for pos, lg := range got {
				if lg == nil {
					continue
				}
				want := graph[(row*e.seqLen+pos)*V : (row*e.seqLen+pos+1)*V]
				if r := maxRelErr(toF64(lg), want); r > 2e-6 {
					t.Fatalf("row %d, prefill %d, position %d: decoder logits differ from the graph by %.3g", row, prefill, pos, r)
				}
			}
		}
	}
}

func TestGenerateGreedyStopsAtEOS(t *testing.T) {
	m, err := Load(torchFixture)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(m, nil, blas.Gonum{})
	out, err := d.Generate([][]int{{1, 5, 9}, {1, 22}}, 10, Sampling{})
	if err != nil {
		t.Fatal(err)
	}
	// greedy continuation must equal argmax of the graph-equivalent logits, step by step
	for i, prompt := range [][]int{{1, 5, 9}, {1, 22}} {
		seq := append([]int(nil), prompt...)
		for j, tok := range out[i] {
			d.cache.Reset()
			d.cache.Add()
			lg, err := d.feed(context.Background(), [][]int{seq})
			if err != nil {
				t.Fatal(err)
			}
			if best := pick(lg[0], Sampling{}, nil); best != tok {
				t.Fatalf("prompt %d step %d: generated %d, argmax %d", i, j, tok, best)
			}
			if tok == m.Config.EOSTokenID {
				t.Fatalf("EOS returned as a token")
			}
			seq = append(seq, tok)
		}
		if len(out[i]) > 10 {
			t.Fatalf("generated %d > 10 tokens", len(out[i]))
		}
	}
	if _, err := d.Generate([][]int{{1, 99}}, 3, Sampling{}); err == nil {
		t.Fatal("a prompt outside the vocabulary generated")
	}
	// any of several stop ids ends a generation: stopping at the first
	// token greedy decoding would produce leaves nothing
	full, _ := d.Generate([][]int{{1, 5, 9}}, 6, Sampling{})
	if len(full[0]) < 2 {
		t.Fatalf("greedy run too short to test stopping: %v", full[0])
	}
	d.Stop = []int{m.Config.EOSTokenID, full[0][1]}
	cut, _ := d.Generate([][]int{{1, 5, 9}}, 6, Sampling{})
	if !slices.Equal(cut[0], full[0][:1]) {
		t.Fatalf("with stop ids %v: %v, want %v", d.Stop, cut[0], full[0][:1])
	}
	d.Stop = []int{m.Config.EOSTokenID}
	a, _ := d.Generate([][]int{{1, 5}}, 8, Sampling{Temperature: 1, TopK: 5, Seed: 3})
	b, _ := d.Generate([][]int{{1, 5}}, 8, Sampling{Temperature: 1, TopK: 5, Seed: 3})
	if !slices.Equal(a[0], b[0]) {
		t.Fatal("sampling with the same seed differs")
	}
}
