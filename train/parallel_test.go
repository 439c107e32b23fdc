package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/optim"
)

// Data-parallel training with in-process ranks (dist.NewLocal): each rank
// runs Run on goroutines of its own, as it would in a process of its own.
// The same code paths run over MPI in cmd/mixtune's tests.

// runRanks trains r on n in-process ranks (n = 0: one process, no Comm)
// and returns rank 0's summary. stopAt > 0 interrupts rank 0 after that
// step: the others must stop with it.
func runRanks(t *testing.T, n int, r func() *Recipe, opt Options, stopAt int) (*Summary, error) {
	t.Helper()
	if n == 0 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		opt.afterStep = func(s int) {
			if s == stopAt {
				cancel()
			}
		}
		return Run(ctx, r(), opt)
	}
	sums, errs := trainRanks(n, r, opt, func(cancel context.CancelFunc, o *Options) {
		o.afterStep = func(s int) {
			if s == stopAt {
				cancel()
			}
		}
	})
	for i := 1; i < n; i++ {
		if (errs[i] == nil) != (errs[0] == nil) {
			t.Fatalf("rank 0 returned %v, rank %d %v", errs[0], i, errs[i])
		}
		if errs[0] == nil && (sums[i] == nil || sums[i].Steps != sums[0].Steps || sums[i].FinalLoss != sums[0].FinalLoss || sums[i].RunDir != sums[0].RunDir) {
			t.Fatalf("rank %d's summary %+v differs from rank 0's %+v", i, sums[i], sums[0])
		}
	}
	return sums[0], errs[0]
}

// trainRanks runs Run on n in-process ranks, each with its own context;
// rank0 may set rank 0's options, with the cancel of its context.
func trainRanks(n int, r func() *Recipe, opt Options, rank0 func(cancel context.CancelFunc, o *Options)) ([]*Summary, []error) {
	cs := dist.NewLocal(n)
	sums, errs := make([]*Summary, n), make([]error, n)
	recipes := make([]*Recipe, n) // made here: a t.Fatal inside a rank would leave the others waiting
	for i := range recipes {
		recipes[i] = r()
	}
	var wg sync.WaitGroup
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cs[i].Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := opt
			o.Comm = cs[i]
			if i == 0 && rank0 != nil {
				rank0(cancel, &o)
			}
			sums[i], errs[i] = Run(ctx, recipes[i], o)
		}()
	}
	wg.Wait()
	return sums, errs
}

// dpRecipe is the fixture's recipe with a global batch of 8 rows in 2
// micro-batches, dropout on (masks must follow rows, not ranks), and every
// step logged.
func dpRecipe(t *testing.T, dir string, extra ...string) func() *Recipe {
	cfg := writeConfig(t, dir, goodConfig)
	return func() *Recipe {
		sets := append([]string{"train.steps=8", "train.batch_size=8", "train.grad_accum=2", "train.log_every=1",
			"train.eval_every=4", "adapter.dropout=0.1", "compute.blas=gonum", "schedule.warmup_steps=2"}, extra...)
		r, err := Load(cfg, sets)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// computed drops the fields that measure time, not the computation.
func computed(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		switch k {
		case "tokens_per_s", "elapsed_s", "allreduce_s", "allreduce_busy_s":
		default:
			out[k] = v
		}
	}
	return out
}

// compareRuns checks two runs' metrics line by line: bit for bit with tol
// 0, else within tol relative (the fp32 summation order of different
// world sizes).
func compareRuns(t *testing.T, a, b string, tol float64) { compareRunsFloor(t, a, b, tol, 1e-3) }

// compareRunsFloor is compareRuns within tol of max(|value|, floor): a
// floor of 1 for values that are differences of larger ones, whose
// error is the larger ones' (DPO's reward margins).
func compareRunsFloor(t *testing.T, a, b string, tol, floor float64) {
	t.Helper()
	ma, mb := readMetrics(t, a), readMetrics(t, b)
	if len(ma) != len(mb) {
		t.Fatalf("%d metrics lines vs %d", len(ma), len(mb))
	}
	for i := range ma {
		x, y := computed(ma[i]), computed(mb[i])
		if len(x) != len(y) {
			t.Fatalf("line %d: fields %v vs %v", i, x, y)
		}
		for k, v := range x {
			w := y[k]
			switch {
			case tol == 0 && math.Float64bits(v) != math.Float64bits(w):
				t.Fatalf("line %d: %s = %v vs %v (want the same bits)", i, k, v, w)
			case tol > 0 && !(math.Abs(v-w) <= tol*math.Max(math.Abs(v), floor)):
				t.Fatalf("line %d: %s = %v vs %v (beyond %g relative)", i, k, v, w, tol)
			}
		}
	}
}

func TestDataParallelMatchesOneProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("trains several times")
	}
	for _, variant := range []struct {
		name string
		sets []string
	}{
		{"fp32 lora", nil},
		// fp16 from a scale that overflows: the first steps are skipped on
		// every rank together, as one process skips them
		{"fp16 lora, overflowing scale", []string{"precision=fp16", "amp.init_scale=1.0e+30"}},
		{"full fine-tuning", []string{"adapter.type=none", "task.eval_file="}},
	} {
		t.Run(variant.name, func(t *testing.T) {
			dir := fixture(t)
			rec := dpRecipe(t, dir, variant.sets...)
			one, err := runRanks(t, 0, rec, Options{Out: io.Discard}, 0)
			if err != nil {
				t.Fatal(err)
			}
			two, err := runRanks(t, 2, rec, Options{Out: io.Discard}, 0)
			if err != nil {
				t.Fatal(err)
			}
			twoOverlap, err := runRanks(t, 2, rec, Options{Out: io.Discard, Overlap: true, BucketBytes: 256}, 0)
			if err != nil {
				t.Fatal(err)
			}
			three, err := runRanks(t, 3, rec, Options{Out: io.Discard, Overlap: true}, 0) // 8 rows: 2, 3 and 3
			if err != nil {
				t.Fatal(err)
			}
			// the same as one process up to the fp32 summation order
			compareRuns(t, one.RunDir, two.RunDir, 2e-5)
			compareRuns(t, one.RunDir, three.RunDir, 2e-5)
			// reductions during the backward pass (small buckets, several
			// per step) change nothing: the ranks add in rank order
			compareRuns(t, two.RunDir, twoOverlap.RunDir, 0)
			if variant.name == "fp16 lora, overflowing scale" {
				ms := readMetrics(t, two.RunDir)
				if ms[1]["step"] != 1 || ms[1]["skipped"] != 1 {
					t.Errorf("the first step was not skipped: %v", ms[1])
				}
			}
			if one.TaskAfter != nil && (two.TaskAfter.Total != one.TaskAfter.Total || three.TaskAfter.Total != one.TaskAfter.Total || len(three.TaskAfter.Samples) != len(one.TaskAfter.Samples)) {
				t.Errorf("task reports: one process %+v, 2 ranks %+v, 3 ranks %+v", one.TaskAfter, two.TaskAfter, three.TaskAfter)
			}
			if two.ValAfter.Tokens != one.ValAfter.Tokens || two.ValAfter.Batches != one.ValAfter.Batches {
				t.Errorf("validation over %+v, one process over %+v", two.ValAfter, one.ValAfter)
			}
			// a repeat is bit-identical
			again, err := runRanks(t, 2, rec, Options{Out: io.Discard}, 0)
			if err != nil {
				t.Fatal(err)
			}
			compareRuns(t, two.RunDir, again.RunDir, 0)
			f := firstFile(t, two.Saved)
			sameFile(t, filepath.Join(two.Saved, f), filepath.Join(again.Saved, f))

			// run.json records the world; only rank 0 made a run directory
			var m Manifest
			b, err := os.ReadFile(filepath.Join(three.RunDir, "run.json"))
			if err != nil || json.Unmarshal(b, &m) != nil {
				t.Fatal(err)
			}
			if m.WorldSize != 3 || m.Launcher != "in-process" || len(m.Ranks) != 3 || m.Ranks[2].Host == "" {
				t.Errorf("run.json world: %d ranks by %q: %+v", m.WorldSize, m.Launcher, m.Ranks)
			}
			ents, _ := os.ReadDir(filepath.Join(dir, "runs"))
			if len(ents) != 5 {
				t.Errorf("%d run directories for 5 runs", len(ents))
			}
		})
	}
}

func firstFile(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("%s: %v", dir, err)
	}
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".safetensors" {
			return e.Name()
		}
	}
	return ents[0].Name()
}

// A checkpoint of N ranks resumes on N ranks bit for bit, and on another
// world size within fp32 rounding: the data order is the global batch's.
func TestDataParallelResume(t *testing.T) {
	if testing.Short() {
		t.Skip("trains several times")
	}
	dir := fixture(t)
	rec := dpRecipe(t, dir, "train.steps=10", "train.checkpoint_every=3", "task.eval_file=")
	opt := Options{Out: io.Discard, Overlap: true}
	full, err := runRanks(t, 2, rec, opt, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 0, 3} {
		t.Run(fmt.Sprintf("resume on %d ranks", max(n, 1)), func(t *testing.T) {
			cutRec := func() *Recipe {
				r := rec()
				r.Name = fmt.Sprintf("cut%d", n)
				return r
			}
			cut, err := runRanks(t, 2, cutRec, opt, 5)
			if err != ErrInterrupted || cut.Steps != 5 {
				t.Fatalf("interrupting: %v, %+v", err, cut)
			}
			o := opt
			o.ResumeDir = cut.RunDir
			res, err := runRanks(t, n, cutRec, o, 0)
			if err != nil {
				t.Fatal(err)
			}
			if n == 2 {
				compareRuns(t, full.RunDir, res.RunDir, 0)
				sameFile(t, filepath.Join(full.Saved, "adapter_model.safetensors"), filepath.Join(res.Saved, "adapter_model.safetensors"))
			} else {
				compareRuns(t, full.RunDir, res.RunDir, 2e-5)
			}
		})
	}
}

// Ranks given different recipes are refused before training, on every
// rank, with a message naming the rank and what differs.
func TestDataParallelRefusesMismatchedRanks(t *testing.T) {
	dir := fixture(t)
	cfg := writeConfig(t, dir, goodConfig)
	cs := dist.NewLocal(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cs[i].Close()
			sets := []string{"train.steps=2", "compute.blas=gonum", "task.eval_file="}
			if i == 1 {
				sets = append(sets, "optimizer.lr=0.5")
			}
			r, err := Load(cfg, sets)
			if err != nil {
				errs[i] = err
				return
			}
			_, errs[i] = Run(context.Background(), r, Options{Out: io.Discard, Comm: cs[i]})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !IsInputError(err) || !dist.IsJobError(err) || dist.IsQuiet(err) != (i > 0) {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	if msg := errs[0].Error(); !strings.Contains(msg, "rank 1 on ") || !strings.Contains(msg, "recipe") {
		t.Errorf("message %q names neither the rank nor the recipe", errs[0])
	}
	if _, err := os.Stat(filepath.Join(dir, "runs")); err == nil {
		t.Error("a run directory was made")
	}
}

// The rows of each micro-batch are split in contiguous shares, and a short
// share is padded with rows that hold no target.
func TestShard(t *testing.T) {
	const L = 3
	bt := data.Batch{Rows: 5, SeqLen: L}
	for i := 0; i < 5*L; i++ {
		bt.Inputs = append(bt.Inputs, 100+i)
		bt.Targets = append(bt.Targets, 200+i)
		bt.Positions = append(bt.Positions, i%L)
	}
	bt.Targets[0] = data.IgnoreIndex
	bt.NumTargets = 5*L - 1
	var rows []int
	total := 0
	for r := 0; r < 3; r++ {
		dp := newDataParallel(dist.NewLocal(3)[r], 5, L, 7, []*optim.Param{{Name: "w", Grad: make([]float32, 2)}}, false, 0)
		s := dp.shard(bt)
		if s.Rows != 2 || len(s.Inputs) != 2*L {
			t.Fatalf("rank %d: %d rows", r, s.Rows)
		}
		n := dp.hi - dp.lo
		rows = append(rows, n)
		for i := 0; i < n*L; i++ {
			if s.Inputs[i] != bt.Inputs[dp.lo*L+i] || s.Targets[i] != bt.Targets[dp.lo*L+i] {
				t.Fatalf("rank %d: token %d is %d→%d", r, i, s.Inputs[i], s.Targets[i])
			}
		}
		for i := n * L; i < 2*L; i++ {
			if s.Inputs[i] != 7 || s.Targets[i] != data.IgnoreIndex {
				t.Fatalf("rank %d: padding token %d is %d→%d", r, i, s.Inputs[i], s.Targets[i])
			}
		}
		total += s.NumTargets
	}
	if fmt.Sprint(rows) != "[1 2 2]" || total != bt.NumTargets {
		t.Fatalf("shares %v, %d targets of %d", rows, total, bt.NumTargets)
	}
}

// A preference run's ranks share out pairs: 4 pairs among 3 ranks as 1,
// 1 and 2, each rank's chosen rows then its rejected rows, a pair's two
// sequences on the same rank, padding pairs (no targets) after them, and
// every target, chosen token and reference value on exactly one rank.
func TestPairShard(t *testing.T) {
	const L, P = 3, 4
	var ps []data.Pair
	for i := range P {
		ex := func(base int) data.Example {
			return data.Example{IDs: []int{base, base + 1, base + 2, base + 3}, Target: []bool{false, false, true, true}}
		}
		ps = append(ps, data.Pair{Chosen: ex(10 * i), Rejected: ex(100 + 10*i), Reference: []float64{float64(-i), float64(-10 - i)}})
	}
	bt := data.BatchPairs(ps, L, 7)
	var shares []int
	targets, chosen := 0, 0
	for r := range 3 {
		dp := newDataParallel(dist.NewLocal(3)[r], P, L, 7, []*optim.Param{{Name: "w", Grad: make([]float32, 2)}}, false, 0)
		s, padding := dp.pairShard(bt)
		n := dp.hi - dp.lo
		shares = append(shares, n)
		if s.Rows != 4 || s.Pairs != n || padding != 2-n || len(s.Tokens) != 4 || len(s.Reference) != 4 {
			t.Fatalf("rank %d: %d rows, %d pairs, %d padding, %d lengths, %d reference values", r, s.Rows, s.Pairs, padding, len(s.Tokens), len(s.Reference))
		}
		for half := range 2 {
			for j := range 2 {
				row, src := half*2+j, half*P+dp.lo+j
				got := fmt.Sprint(s.Inputs[row*L:(row+1)*L], s.Targets[row*L:(row+1)*L], s.Tokens[row], s.Reference[row])
				want := fmt.Sprint(bt.Inputs[src*L:(src+1)*L], bt.Targets[src*L:(src+1)*L], bt.Tokens[src], bt.Reference[src])
				if j >= n {
					want = fmt.Sprint([]int{7, 7, 7}, []int{data.IgnoreIndex, data.IgnoreIndex, data.IgnoreIndex}, 0, 0)
				}
				if got != want {
					t.Errorf("rank %d, row %d: %s, want %s", r, row, got, want)
				}
			}
		}
		targets += s.NumTargets
		chosen += s.ChosenTokens
	}
	if fmt.Sprint(shares) != "[1 1 2]" || targets != bt.NumTargets || chosen != bt.ChosenTokens {
		t.Errorf("shares %v, %d targets of %d, %d chosen tokens of %d", shares, targets, bt.NumTargets, chosen, bt.ChosenTokens)
	}
}

// Gradient taps see each weight's gradient as soon as the backward pass
// has it, last layer first, and change no value: the gradients with taps
// are those without, bit for bit (full fine-tuning, LoRA and DoRA, fp32 and bf16).
func TestGradTapsFireDuringBackward(t *testing.T) {
	for _, adapter := range []AdapterKind{"none", LoRA, DoRA} {
		for _, precision := range []amp.Format{amp.FP32, amp.BF16} {
			c := DefaultBench()
			c.Adapter, c.Layers, c.SeqLen, c.Batch, c.BLAS = adapter, 3, 16, 2, "gonum"
			eng, m, lora, err := benchModel(c)
			if err != nil {
				t.Fatal(err)
			}
			var policy *amp.Policy
			if precision != amp.FP32 {
				r := &Recipe{Config: Defaults()}
				p, err := r.policyFor(precision)
				if err != nil {
					t.Fatal(err)
				}
				policy = &p
			}
			bt := data.Batch{Rows: c.Batch, SeqLen: c.SeqLen, Inputs: make([]int, c.Batch*c.SeqLen), Targets: make([]int, c.Batch*c.SeqLen)}
			for i := range bt.Inputs {
				bt.Inputs[i], bt.Targets[i] = (7*i)%c.Vocab, (3*i+1)%c.Vocab
			}
			bt.NumTargets = len(bt.Targets)
			grads := func(tapped bool) ([][]float32, []string) {
				params := trainables(m, lora)
				var order []string
				idx := paramIndex(params)
				var tap nn.GradTap
				if tapped {
					tap = func(name string) func([]float32) {
						p := params[idx[name]]
						return func(g []float32) {
							order = append(order, name)
							copy(p.Grad, g)
						}
					}
				}
				ru, err := buildRunner(eng, m, lora, c.Batch, c.SeqLen, params, policy, trainGraph(tap, 1, false))
				if err != nil {
					t.Fatal(err)
				}
				defer ru.close()
				if _, err := ru.run(bt, 1, true, 0); err != nil {
					t.Fatal(err)
				}
				var gs [][]float32
				for _, p := range params {
					gs = append(gs, append([]float32(nil), p.Grad...))
				}
				return gs, order
			}
			plain, _ := grads(false)
			tapped, order := grads(true)
			name := fmt.Sprintf("%s %s", adapter, precision)
			if len(order) != len(plain) {
				t.Fatalf("%s: %d taps for %d params", name, len(order), len(plain))
			}
			for i := range plain {
				for j := range plain[i] {
					if math.Float32bits(plain[i][j]) != math.Float32bits(tapped[i][j]) {
						t.Fatalf("%s: param %d value %d: %v with taps, %v without", name, i, j, tapped[i][j], plain[i][j])
					}
				}
			}
			// the last layer's gradients come before the first layer's
			first := map[string]int{}
			for i, n := range order {
				for _, l := range []string{"layers.0.", "layers.2."} {
					if _, ok := first[l]; !ok && strings.Contains(n, l) {
						first[l] = i
					}
				}
			}
			if !(first["layers.2."] < first["layers.0."]) {
				t.Fatalf("%s: taps in order %v", name, order)
			}
		}
	}
}

// For go test -race (.ci/run): two in-process ranks of full fine-tuning
// with a bucket per param or so, reduced on the comm goroutines while the
// backward pass goes on.
func TestDataParallelOverlapIsRaceFree(t *testing.T) {
	dir := fixture(t)
	rec := dpRecipe(t, dir, "train.steps=2", "adapter.type=none", "task.eval_file=", "train.eval_every=0")
	sum, err := runRanks(t, 2, rec, Options{Out: io.Discard, Overlap: true, BucketBytes: 1024}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Steps != 2 {
		t.Fatalf("%+v", sum)
	}
}
