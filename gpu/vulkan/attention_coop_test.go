package vulkan

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// attnCoopCases cover what the tensor-core kernels must do as the scalar
// one does: causal masking over a ragged last tile (T not a multiple of
// 64), packed documents starting mid-tile, a window reaching across
// tiles, grouped heads (2 and 4 query heads a key/value head, and none),
// head dimensions 64 and 128 and two below their class (40 and 18: zero
// columns in the fragments; 18, no multiple of 4, staged two values at a
// time rather than four), two batch rows, and both formats. lavapipe compiles
// each set of kernels (a head-dimension class, a format) on first use in
// about 25 s on 2 cores, the scalar kernel's too: the formats and classes
// are spread over the cases rather than crossed, and -short keeps the
// first two (under the validation layer, the first two whose kernels fit
// the shared memory lavapipe reports: attnOverValidation).
type attnCoopCase struct {
	name    string
	s       AttentionShape
	docs    []int
	formats []Rounding
}

var attnCoopCases = []attnCoopCase{
	{"causal ragged", AttentionShape{Batch: 2, SeqLen: 70, Heads: 2, KVHeads: 2, HeadDim: 64}, nil, []Rounding{RoundBF16, RoundFP16}},
	{"head dim 40 window", AttentionShape{Batch: 1, SeqLen: 66, Heads: 2, KVHeads: 2, HeadDim: 40, Window: 20}, nil, []Rounding{RoundFP16}},
	{"head dim 18", AttentionShape{Batch: 1, SeqLen: 40, Heads: 2, KVHeads: 1, HeadDim: 18}, []int{25, 15}, []Rounding{RoundBF16}},
	{"packed gqa", AttentionShape{Batch: 1, SeqLen: 100, Heads: 4, KVHeads: 2, HeadDim: 64}, []int{37, 50, 13}, []Rounding{RoundBF16, RoundFP16}},
	{"window mqa", AttentionShape{Batch: 1, SeqLen: 130, Heads: 4, KVHeads: 1, HeadDim: 64, Window: 45}, nil, []Rounding{RoundBF16}},
	{"head dim 128 packed gqa", AttentionShape{Batch: 1, SeqLen: 90, Heads: 2, KVHeads: 1, HeadDim: 128}, []int{70, 20}, []Rounding{RoundBF16}},
}

// attnOverValidation reports, and logs, whether the tensor-core attention
// kernels for heads d wide take more shared memory than p reports while
// the Khronos validation layer runs, which rejects such a shader (rightly).
// lavapipe reports 32 KiB and runs the 36 and 45 KiB builds for heads up
// to 64 wide correctly, so the plain run covers them and the validation
// run the others (emulatedTiles' rule for the GEMM tiles).
func attnOverValidation(t *testing.T, p *PhysicalDevice, d int) bool {
	t.Helper()
	need := max(attnCoopSharedFor("fwd", d), attnCoopSharedFor("dq", d), attnCoopSharedFor("dkv", d))
	if !underValidation() || need <= p.MaxSharedMemory {
		return false
	}
	t.Logf("head dim %d: the kernels take up to %d bytes of shared memory, over the %d %s reports: left out under the validation layer", d, need, p.MaxSharedMemory, p.Name)
	return true
}

// useEmulatedAttention gives both 16-bit formats' attention to the
// -DEMULATE builds of attention_coop.comp (their fragments in plain
// code), until the test ends.
func useEmulatedAttention(t *testing.T, ks *Kernels) {
	t.Helper()
	had := ks.attn.builds
	ks.attn.builds = map[Rounding]attnBuild{RoundFP16: {"attention_coop_emu", RoundFP16}, RoundBF16: {"attention_coop_emu", RoundBF16}}
	t.Cleanup(func() { ks.attn.builds = had })
}

func TestAttnKeepMaxFor(t *testing.T) {
	for _, tc := range []struct{ mem, want uint64 }{
		{0, defaultAttnKeepMax}, {80 << 30, 1 << 30}, {16 << 30, 1 << 30}, {8 << 30, 512 << 20}, {4 << 30, 256 << 20},
	} {
		if got := attnKeepMaxFor(&PhysicalDevice{DeviceLocalBytes: tc.mem}); got != tc.want {
			t.Errorf("%d bytes of device memory: keeps scores in up to %d bytes, want %d", tc.mem, got, tc.want)
		}
	}
}

// TestAttentionCoopEmulated runs the tensor-core attention kernels'
// source on any device, lavapipe included, with the fragments emulated
// (fp32 fmas in k order), for bf16 and fp16 products:
//   - against attnReference (float64 on the same 16-bit inputs, every
//     value within its bound: the products' sums within γ_n·Σ|a||b|
//     propagated through the softmax and its backward, a rounding point
//     exact unless a boundary lies within its value's error);
//   - against the scalar kernel, bit for bit: the emulation sums each
//     product in the scalar kernel's order (d in order; keys, or queries,
//     in order, tile after tile), so any difference is in the rest of the
//     kernel (staging, masks, the fragments' layout, the ways out);
//   - twice, bit-identical;
//   - with the scores computed again rather than kept (attnKept),
//     bit-identical;
//
// then the scalar kernel against the same reference, the reference
// against a faulty kernel, and the self-check NewKernels runs.
func TestAttentionCoopEmulated(t *testing.T) {
	_, ks := openKernels(t)
	rng := rand.New(rand.NewPCG(41, 43))
	worst := map[Rounding]float64{}
	var cases []attnCoopCase
	for _, c := range attnCoopCases {
		if attnOverValidation(t, ks.d.Physical, c.s.HeadDim) {
			continue
		}
		cases = append(cases, c)
	}
	if testing.Short() {
		cases = cases[:min(2, len(cases))]
	}
	for _, c := range cases {
		for _, f := range c.formats {
			rc := newAttnCase(rng, c.s, f, c.docs)
			t.Run(c.name+"/"+f.String(), func(t *testing.T) {
				useEmulatedAttention(t, ks)
				if got := ks.attentionFile(rc.s, "dkv"); !strings.Contains(got, "coop_emu") {
					t.Fatalf("the shape runs %s, not the emulated tensor-core kernel", got)
				}
				got, _, w := attnRunAgainstReference(t, ks, rc)
				worst[f] = max(worst[f], w)
				again, err := ks.runAttention(rc)
				must(t, err)
				if d := attnDiffer(got, again); d != "" {
					t.Errorf("rerun differs: %s", d)
				}
				// The scores kept (attnKept) in both passes here; computed
				// again instead, the same bits.
				r, err := ks.d.NewRecorder()
				must(t, err)
				for _, m := range []int{1, 2} {
					if b, err := ks.attnKept(r, rc.s, m); err != nil || b == nil {
						t.Errorf("%d kept matrices: %v, %v: the kernels would compute the scores again", m, b, err)
					}
				}
				r.Close()
				keepMax := ks.attnKeepMax
				ks.attnKeepMax = 0
				recomputed, err := ks.runAttention(rc)
				ks.attnKeepMax = keepMax
				must(t, err)
				if d := attnDiffer(got, recomputed); d != "" {
					t.Errorf("the scores kept and computed again differ: %s", d)
				}
				// The dK/dV kernel split in two (KernelOptions.SplitDKV):
				// the same bits, the scores kept and computed again; the
				// engine's description says so.
				ks.splitDKV = true
				if names := ks.AttentionNames(); !strings.HasSuffix(names, ", dK and dV in two kernels") {
					t.Errorf("split, AttentionNames() = %q", names)
				}
				split, err := ks.runAttention(rc)
				must(t, err)
				ks.attnKeepMax = 0
				splitRecomputed, err := ks.runAttention(rc)
				ks.splitDKV, ks.attnKeepMax = false, keepMax
				must(t, err)
				if d := attnDiffer(got, split); d != "" {
					t.Errorf("dK and dV in two kernels differ from one: %s", d)
				}
				if d := attnDiffer(got, splitRecomputed); d != "" {
					t.Errorf("dK and dV in two kernels, the scores computed again, differ from one: %s", d)
				}
				// The gradients left in fp32 and rounded after (a
				// counted rounding: AttentionGrads.Unrounded) are the
				// same bits.
				un := rc
				un.unrounded = true
				unrounded, err := ks.runAttention(un)
				must(t, err)
				if d := attnDiffer(got, unrounded); d != "" {
					t.Errorf("the gradients rounded after the kernels differ: %s", d)
				}
				ks.attn.builds = nil // the scalar kernel
				scalar, err := ks.runAttention(rc)
				must(t, err)
				if d := attnDiffer(got, scalar); d != "" {
					t.Errorf("emulated tensor-core kernel differs from the scalar kernel: %s", d)
				}
			})
		}
	}
	for f, w := range worst {
		t.Logf("%s: worst error %.3g of the bound", f, w)
	}
	// on the same device: lavapipe compiles each kernel once per device
	t.Run("scalar kernel against the reference", func(t *testing.T) { attnScalarAgainstReference(t, ks) })
	t.Run("the reference catches a dropped rounding point", func(t *testing.T) { attnReferenceCatchesFaults(t, ks) })
	t.Run("self-check", func(t *testing.T) { attnCoopSelfCheck(t, ks) })
}

// attnRunAgainstReference runs rc on the attention kernels ks has in use
// and holds every output to attnReference within its bound, failing the
// test where one is outside it; it logs how close the worst came and
// returns the outputs, the reference and that worst ratio to the bound.
func attnRunAgainstReference(t *testing.T, ks *Kernels, rc attnRefCase) (attnOutputs, attnRefResult, float64) {
	t.Helper()
	got, err := ks.runAttention(rc)
	must(t, err)
	ref := attnReference(rc)
	w, differ, n, err := attnCompare(ref, got, 1)
	if err != nil {
		t.Fatalf("%s: %v", rc, err)
	}
	t.Logf("%s: worst error %.3g of the bound; %d of %d values differ from the float64 reference's", rc, w, differ, n)
	return got, ref, w
}

// attnDiffer names the first value where a and b differ in bits, or "".
func attnDiffer(a, b attnOutputs) string {
	for _, x := range []struct {
		name string
		a, b []float32
	}{{"O", a.o, b.o}, {"stats", a.stats, b.stats}, {"dQ", a.dq, b.dq}, {"dK", a.dk, b.dk}, {"dV", a.dv, b.dv}} {
		for i := range x.a {
			if math.Float32bits(x.a[i]) != math.Float32bits(x.b[i]) {
				return x.name + "[" + strconv.Itoa(i) + "]: " + strconv.FormatFloat(float64(x.a[i]), 'g', -1, 32) + " and " + strconv.FormatFloat(float64(x.b[i]), 'g', -1, 32)
			}
		}
	}
	return ""
}

// attnScalarAgainstReference holds the scalar kernel to the same
// float64 reference and bound (it is a correct kernel too, so the bound
// must hold for it): a check of the bound as much as of the kernel.
func attnScalarAgainstReference(t *testing.T, ks *Kernels) {
	ks.attn.builds = nil
	rng := rand.New(rand.NewPCG(47, 53))
	worst := 0.0
	for _, c := range attnCoopCases[:2] {
		for _, f := range c.formats {
			rc := newAttnCase(rng, c.s, f, c.docs)
			_, _, w := attnRunAgainstReference(t, ks, rc)
			worst = max(worst, w)
		}
	}
	t.Logf("scalar kernel: worst error %.3g of the bound", worst)
}

// attnReferenceCatchesFaults: the reference's bound is tight
// enough to see what a wrong kernel does: the scalar kernel run with a
// rounding point dropped (P not rounded to the values' format before
// P·V, dS not rounded) fails it.
func attnReferenceCatchesFaults(t *testing.T, ks *Kernels) {
	ks.attn.builds = nil
	rng := rand.New(rand.NewPCG(59, 61))
	rc := newAttnCase(rng, attnCoopCases[0].s, RoundBF16, nil)
	ref := attnReference(rc)
	bad := rc
	bad.s.Values, bad.s.Operands = NoRounding, NoRounding // P·V and dP in fp32
	got, err := ks.runAttention(bad)
	must(t, err)
	if _, _, _, err := attnCompare(ref, got, 1); err == nil {
		t.Error("a kernel without the values' rounding point passes the reference")
	}
}

// attnCoopSelfCheck: the check NewKernels runs before using the
// tensor-core attention kernels passes their emulated bf16 builds and
// refuses a planted fault (fp16 products on the build that narrows to
// bf16), leaving the kernels in use as they were. (The fp16 builds are
// the same source but for narrow: TestAttentionCoopEmulated runs them;
// each build lavapipe compiles costs CI about 25 s, so -short, the
// validation run, checks the fault alone.)
func attnCoopSelfCheck(t *testing.T, ks *Kernels) {
	if attnOverValidation(t, ks.d.Physical, attnCheckShapes()[0].s.HeadDim) {
		t.Skip("the self-check's first shape runs kernels over the shared memory the device reports (above)")
	}
	before := ks.AttentionNames()
	if !testing.Short() {
		if err := ks.attnSelfCheck(RoundBF16, attnBuild{"attention_coop_emu", RoundBF16}); err != nil {
			t.Fatal(err)
		}
	}
	err := ks.attnSelfCheck(RoundFP16, attnBuild{"attention_coop_emu", RoundBF16})
	if err == nil || !strings.Contains(err.Error(), "self-check of the fp16 attention kernels") {
		t.Fatalf("fp16 products on the bf16 build: %v, want a self-check failure", err)
	}
	t.Logf("planted fault: %v", err)
	if got := ks.AttentionNames(); got != before {
		t.Errorf("after the self-checks AttentionNames() = %q, was %q", got, before)
	}
}

// TestAttentionTensorCores checks the tensor-core attention kernels the
// device runs (a GPU with cooperative matrices; NewKernels self-checked
// them) on every case of attnCoopCases in both formats: against
// attnReference within its bound, against the scalar kernel within twice
// it (each is within the bound of the reference), twice bit-identical,
// and bit-identical with the dK/dV kernel in the other form (split in two
// or not: KernelOptions.SplitDKV). It skips where no tensor-core attention is in use, as on
// lavapipe (TestAttentionCoopEmulated runs their source there).
func TestAttentionTensorCores(t *testing.T) {
	e, ks := openKernels(t)
	var formats []Rounding
	for _, f := range []Rounding{RoundBF16, RoundFP16} {
		if name, ok := ks.AttentionVariant(f); ok {
			t.Logf("%s products: %s", f, name)
			formats = append(formats, f)
		}
	}
	if len(formats) == 0 {
		t.Skipf("%s runs no tensor-core attention (%s): it needs the tensor-core GEMM of the format in use (cooperative matrices)", e.dev.Physical.Name, ks.AttentionNames())
	}
	rng := rand.New(rand.NewPCG(67, 71))
	builds := ks.attn.builds
	defer func() { ks.attn.builds = builds }()
	for _, f := range formats {
		worst, worstScalar := 0.0, 0.0
		for _, c := range attnCoopCases {
			rc := newAttnCase(rng, c.s, f, c.docs)
			ks.attn.builds = builds
			got, ref, w := attnRunAgainstReference(t, ks, rc)
			worst = max(worst, w)
			again, err := ks.runAttention(rc)
			must(t, err)
			if d := attnDiffer(got, again); d != "" {
				t.Errorf("%s: rerun differs: %s", rc, d)
			}
			ks.splitDKV = !ks.splitDKV // the other dK/dV form: the same bits
			other, err := ks.runAttention(rc)
			ks.splitDKV = !ks.splitDKV
			must(t, err)
			if d := attnDiffer(got, other); d != "" {
				t.Errorf("%s: dK and dV in one kernel and in two differ: %s", rc, d)
			}
			ks.attn.builds = nil
			scalar, err := ks.runAttention(rc)
			must(t, err)
			// the scalar kernel's values as a reference with twice the bound
			sref := attnRefResult{o: attnBounded{f64(scalar.o), ref.o.bound}, stats: attnBounded{f64(scalar.stats), ref.stats.bound},
				dq: attnBounded{f64(scalar.dq), ref.dq.bound}, dk: attnBounded{f64(scalar.dk), ref.dk.bound}, dv: attnBounded{f64(scalar.dv), ref.dv.bound}}
			ws, _, _, err := attnCompare(sref, got, 2)
			if err != nil {
				t.Errorf("%s: against the scalar kernel: %v", rc, err)
			}
			worstScalar = max(worstScalar, ws)
		}
		t.Logf("%s: worst error %.3g of the bound against float64, %.3g of twice it against the scalar kernel", f, worst, worstScalar)
	}
}

func f64(xs []float32) []float64 {
	ys := make([]float64, len(xs))
	for i, x := range xs {
		ys[i] = float64(x)
	}
	return ys
}
