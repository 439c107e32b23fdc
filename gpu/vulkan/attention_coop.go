package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/mixtune/mixtune/amp"
)

// Attention on tensor cores (shaders/attention_coop.comp): attention.comp's
// passes with their products on 16×16×16 cooperative-matrix fragments,
// for shapes whose products' operands are all values of one 16-bit format
// (AttentionShape.Operands, and the scores and values rounded to it), head
// dimensions up to attnCoopMaxHeadDim. Only the products' fp32 summation
// order differs from the scalar kernel's, and it is fixed.

// attnCoopMaxHeadDim is the largest head dimension the tensor-core
// kernels are built for (classes 64 and 128); wider heads keep the
// scalar kernel.
const attnCoopMaxHeadDim = 128

// attnCoopSharedFor is the shared memory, in bytes, of the tensor-core
// kernel for pass ("fwd", "dq", "dkv", "dk", "dv") and head dimension d
// (an upper bound: the dK/dV kernels declare one row array, not three):
// the staged
// operands (2·64·20 uints), a 64×65 fp32 tile, the row starts and two row
// sums; and in the forward and dQ builds for heads up to 64 wide the
// band's rows of Q (and dO) staged once (attention_coop.comp's A_ONCE),
// 64 rows of 36 uints each.
func attnCoopSharedFor(pass string, d int) uint32 {
	n := uint32(2*attnTile*20 + attnTile*(attnTile+1) + 3*attnTile)
	if d <= 64 {
		switch pass {
		case "fwd":
			n += attnTile * 36
		case "dq":
			n += 2 * attnTile * 36
		}
	}
	return 4 * n
}

// defaultAttnKeepMax is the most device memory the tensor-core kernels
// keep scores in (attnKept): 512 MiB at TinyLlama's shape (2,048
// tokens, 32 heads, S and dP).
const defaultAttnKeepMax = 1 << 30

// attnKeepMaxFor is the most memory of p the kernels keep scores in:
// defaultAttnKeepMax, or a sixteenth of its device-local memory where
// that is less (a 4 GiB card gives 256 MiB to them, not 1 GiB).
func attnKeepMaxFor(p *PhysicalDevice) uint64 {
	if p.DeviceLocalBytes > 0 {
		return min(defaultAttnKeepMax, p.DeviceLocalBytes/16)
	}
	return defaultAttnKeepMax
}

// attnKept is the recorder's scratch for the tensor-core kernels to keep
// that many matrices of 16-bit scores in (1: S, the forward; 2: S and dP,
// the backward), [matrices, Batch, Heads, T, T + 192] with T the sequence
// rounded up to the tile, or nil where s's products run on the scalar
// kernel or the matrices would take more than ks.attnKeepMax bytes (the
// kernels then compute them again: the same values).
func (ks *Kernels) attnKept(r *Recorder, s AttentionShape, matrices int) (*Buffer, error) {
	f := s.tensorFormat()
	if f == NoRounding {
		return nil, nil
	}
	if _, ok := ks.attn.builds[f]; !ok {
		return nil, nil
	}
	tp := uint64((s.SeqLen + attnTile - 1) / attnTile * attnTile)
	bytes := uint64(matrices) * uint64(s.Batch) * uint64(s.Heads) * tp * (tp + 192) * 2 // rows of TP + 192 columns (attention_coop.comp)
	if bytes > ks.attnKeepMax || bytes > uint64(ks.d.Physical.MaxStorageBufferRange) {
		return nil, nil
	}
	return r.scratch(bytes)
}

// attnTensor are the tensor-core attention kernels in use, by the
// products' format, and why a format's are not (its products then run on
// the scalar kernel).
type attnTensor struct {
	builds map[Rounding]attnBuild
	errs   map[Rounding]error
}

// attnBuild names a set of attention_coop.comp's builds: their file
// names' prefix ("attention_coop", or "attention_coop_emu" for the
// -DEMULATE builds tests run) and the 16-bit format they narrow to.
type attnBuild struct {
	prefix string
	half   Rounding
}

// file is the build's SPIR-V for pass ("fwd", "dq", "dkv", or "dk" and
// "dv", the dK/dV kernel split in two) and head dimension d.
func (b attnBuild) file(pass string, d int) string {
	class := 64
	if d > 64 {
		class = 128
	}
	return fmt.Sprintf("%s_%s_d%d_%s.spv", b.prefix, pass, class, attnHalf(b.half))
}

// attnHalf names format f in the kernels' file names.
func attnHalf(f Rounding) string {
	if f == RoundFP16 {
		return "fp16"
	}
	return "bf16"
}

// tensorFormat is the 16-bit format the shape's products can run in on
// tensor cores, or NoRounding: Q, K, V (and dO) hold values of one 16-bit
// format, the scores and the probabilities as the values product reads
// them are rounded to it (so are P and dS then), and the head fits a
// build.
func (s AttentionShape) tensorFormat() Rounding {
	f := s.Operands
	if f == NoRounding || s.Scores != f || s.Values != f || s.HeadDim > attnCoopMaxHeadDim {
		return NoRounding
	}
	return f
}

// attnTensorFor reports whether s runs on a tensor-core attention build.
func (ks *Kernels) attnTensorFor(s AttentionShape) bool {
	f := s.tensorFormat()
	if f == NoRounding {
		return false
	}
	_, ok := ks.attn.builds[f]
	return ok
}

// attentionFile is the SPIR-V that runs pass for s: the tensor-core
// kernel of its format where one is in use, else the scalar kernel
// (which has no "dk" and "dv" passes: AttentionBackward asks for them
// only from the tensor-core builds).
func (ks *Kernels) attentionFile(s AttentionShape, pass string) string {
	if f := s.tensorFormat(); f != NoRounding {
		if b, ok := ks.attn.builds[f]; ok {
			return b.file(pass, s.HeadDim)
		}
	}
	return s.kernelFile(pass)
}

// AttentionVariant names the kernel attention's products with operands
// of format f run on, and whether it is a tensor-core one.
func (ks *Kernels) AttentionVariant(f Rounding) (string, bool) {
	b, ok := ks.attn.builds[f]
	if !ok {
		return "attention-scalar-tiled-64x64", false
	}
	if b.prefix == "attention_coop_emu" {
		return "attention-coopmat-emulated-" + attnHalf(f), true
	}
	api := "khr"
	if f == RoundFP16 {
		api = "nv"
	}
	return fmt.Sprintf("attention-coopmat-%s-%s", api, attnHalf(f)), true
}

// AttentionNames says which kernels attention runs on, as GemmNames
// does for the products: "attention-scalar-tiled-64x64, bf16 products on
// attention-coopmat-khr-bf16", and why a format is off the tensor cores.
func (ks *Kernels) AttentionNames() string {
	s := "attention-scalar-tiled-64x64"
	for _, f := range []Rounding{RoundFP16, RoundBF16} {
		if name, ok := ks.AttentionVariant(f); ok {
			s += fmt.Sprintf(", %s products on %s", f, name)
		} else if err := ks.attn.errs[f]; err != nil {
			s += fmt.Sprintf(", %s products off the tensor cores (%v)", f, err)
		}
	}
	if ks.splitDKV && len(ks.attn.builds) > 0 {
		s += ", dK and dV in two kernels"
	}
	return s
}

// chooseAttention takes, for each 16-bit format whose tensor-core GEMM is
// in use (so the device runs cooperative matrices of that format, and
// the GEMM passed its self-check), the tensor-core attention kernels
// after their own self-check; a failure leaves that format's attention on
// the scalar kernel with the reason in AttentionNames.
func (ks *Kernels) chooseAttention() {
	for _, f := range []Rounding{RoundFP16, RoundBF16} {
		if _, ok := ks.gemm[f]; !ok {
			continue
		}
		b := attnBuild{"attention_coop", f}
		err := ks.attnCoopFits(b)
		if err == nil && !ks.d.Physical.coop1Any(f) {
			// a coopmat2 GEMM alone does not say the device runs the
			// subgroup-scope fragments these kernels use
			err = fmt.Errorf("the tensor-core attention kernels need the %s subgroup-scope cooperative matrices the coopmat1 GEMMs use", f)
		}
		if err == nil {
			err = ks.attnSelfCheck(f, b)
		}
		if err != nil {
			if ks.attn.errs == nil {
				ks.attn.errs = map[Rounding]error{}
			}
			ks.attn.errs[f] = err
			continue
		}
		if ks.attn.builds == nil {
			ks.attn.builds = map[Rounding]attnBuild{}
		}
		ks.attn.builds[f] = b
	}
}

// attnCoopFits reports what the device lacks for the tensor-core
// attention kernels of format f beyond what the GEMM's need: their
// shared memory, and their SPIR-V (the bf16 ones need a newer glslang).
func (ks *Kernels) attnCoopFits(b attnBuild) error {
	// dQ's kernel for heads up to 64 wide takes the most: 46,080 bytes
	if need, have := attnCoopSharedFor("dq", 64), ks.d.Physical.MaxSharedMemory; have < need {
		return fmt.Errorf("the tensor-core attention kernels need %d bytes of shared memory; the device has %d", need, have)
	}
	if _, err := shaderFS.Open("shaders/" + b.file("fwd", 64)); err != nil {
		return fmt.Errorf("no embedded %s attention kernel: %w", attnHalf(b.half), err)
	}
	return nil
}

// attnCheckShape is one of the self-check's shapes and its documents.
type attnCheckShape struct {
	s    AttentionShape
	docs []int // document lengths of each batch row (nil: one)
}

// attnCheckShapes are the self-check's shapes: each head-dimension class,
// a ragged last tile, several tiles, grouped heads, packed documents and
// a window.
func attnCheckShapes() []attnCheckShape {
	return []attnCheckShape{
		{AttentionShape{Batch: 1, SeqLen: 80, Heads: 2, KVHeads: 1, HeadDim: 64}, []int{30, 50}},
		{AttentionShape{Batch: 1, SeqLen: 70, Heads: 2, KVHeads: 2, HeadDim: 128, Window: 33}, nil},
	}
}

// attnSelfCheck runs build b's tensor-core attention kernels for the
// products of format f on the device before use and refuses them where a value is
// outside attnReference's bound: the driver's cooperative matrices are
// reported, not proven, and a wrong gradient would train silently.
func (ks *Kernels) attnSelfCheck(f Rounding, b attnBuild) (err error) {
	if ks.attn.builds == nil {
		ks.attn.builds = map[Rounding]attnBuild{}
	}
	prev, had := ks.attn.builds[f]
	ks.attn.builds[f] = b
	defer func() {
		if had {
			ks.attn.builds[f] = prev
		} else {
			delete(ks.attn.builds, f)
		}
	}()
	rng := rand.New(rand.NewPCG(31, 37))
	for _, c := range attnCheckShapes() {
		rc := newAttnCase(rng, c.s, f, c.docs)
		got, err := ks.runAttention(rc)
		if err != nil {
			return fmt.Errorf("self-check of the %s attention kernels: %w", attnHalf(f), err)
		}
		if _, _, _, err := attnCompare(attnReference(rc), got, 1); err != nil {
			return fmt.Errorf("self-check of the %s attention kernels, %s: %w", attnHalf(f), rc, err)
		}
	}
	return nil
}

// newAttnCase is a case of shape s with products in format f (the bf16
// or fp16 policy: scores and values rounded to f, the softmax fp32, every
// gradient and O rounded to f, per-head rounding under grouping): q, k, v
// and dO normal random values rounded to f, docs the lengths of each
// batch row's documents (nil: one document a row).
func newAttnCase(rng *rand.Rand, s AttentionShape, f Rounding, docs []int) attnRefCase {
	s.Scores, s.Values, s.Softmax, s.Operands = f, f, NoRounding, f
	fm := amp.BF16
	if f == RoundFP16 {
		fm = amp.FP16
	}
	n := s.Batch * s.SeqLen
	values := func(cols int) []float32 {
		xs := make([]float32, n*cols)
		for i := range xs {
			xs[i] = fm.Round(float32(rng.NormFloat64()))
		}
		return xs
	}
	grouped := s.Heads > s.KVHeads
	c := attnRefCase{s: s, q: values(s.Heads * s.HeadDim), k: values(s.KVHeads * s.HeadDim), v: values(s.KVHeads * s.HeadDim),
		dO: values(s.Heads * s.HeadDim), out: f, dq: f, dk: f, dv: f, roundHeadsK: grouped, roundHeadsV: grouped}
	if docs != nil {
		for range s.Batch {
			for _, l := range docs {
				for p := range l {
					c.pos = append(c.pos, int32(p))
				}
			}
		}
	}
	return c
}

func (c attnRefCase) String() string {
	s := c.s
	str := fmt.Sprintf("B %d, T %d, %d heads, %d key/value heads, head dim %d, %s", s.Batch, s.SeqLen, s.Heads, s.KVHeads, s.HeadDim, s.Operands)
	if s.Window > 0 {
		str += fmt.Sprintf(", window %d", s.Window)
	}
	if c.pos != nil {
		str += ", packed documents"
	}
	return str
}

// attnOutputs are what a run of the kernels gives: O, the stats, dQ, dK
// and dV.
type attnOutputs struct{ o, stats, dq, dk, dv []float32 }

// runAttention runs the case's forward and backward (every gradient) on
// the device with the kernels attentionFile picks.
func (ks *Kernels) runAttention(c attnRefCase) (out attnOutputs, err error) {
	d, s := ks.d, c.s
	n := s.Batch * s.SeqLen
	qn, kn := n*s.Heads*s.HeadDim, n*s.KVHeads*s.HeadDim
	var bufs []*Buffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	newBuf := func(floats int, xs []float32) *Buffer {
		if err != nil {
			return nil
		}
		var b *Buffer
		if b, err = d.NewBuffer(4 * max(floats, 1)); err != nil {
			return nil
		}
		bufs = append(bufs, b)
		if xs != nil {
			err = b.WriteFloat32(0, xs)
		}
		return b
	}
	// Every output and scratch buffer starts as NaNs, so a value a kernel
	// fails to write shows (a freed buffer's memory, reused here, could
	// otherwise hold a previous run's right answer).
	poison := func(n int) []float32 {
		xs := make([]float32, max(n, 1))
		for i := range xs {
			xs[i] = float32(math.NaN())
		}
		return xs
	}
	q, k, v, dO := newBuf(qn, c.q), newBuf(kn, c.k), newBuf(kn, c.v), newBuf(qn, c.dO)
	stats, o, rowSum := newBuf(s.StatsLen(), poison(s.StatsLen())), newBuf(qn, poison(qn)), newBuf(s.RowSumLen(), poison(s.RowSumLen()))
	dq, dk, dv, heads := newBuf(qn, poison(qn)), newBuf(kn, poison(kn)), newBuf(kn, poison(kn)), newBuf(s.HeadGradsLen(), poison(s.HeadGradsLen()))
	if c.pos != nil {
		pos := newBuf(n, nil)
		if err == nil {
			raw := make([]byte, 4*n)
			for i, x := range c.pos {
				binary.LittleEndian.PutUint32(raw[4*i:], uint32(x))
			}
			err = pos.Write(0, raw)
		}
		s.Positions = pos
	}
	if err != nil {
		return out, err
	}
	r, err := d.NewRecorder()
	if err != nil {
		return out, err
	}
	defer r.Close()
	if err := ks.AttentionForward(r, s, q, k, v, stats, o, c.out); err != nil {
		return out, err
	}
	g := AttentionGrads{DO: dO, RowSum: rowSum, DQ: dq, DK: dk, DV: dv, DQRound: c.dq, DKRound: c.dk, DVRound: c.dv,
		RoundHeadsK: c.roundHeadsK, RoundHeadsV: c.roundHeadsV}
	if s.HeadGradsLen() > 0 {
		g.HeadGrads = heads
	}
	g.Unrounded = c.unrounded
	if err := ks.AttentionBackward(r, s, q, k, v, stats, g); err != nil {
		return out, err
	}
	if c.unrounded {
		for _, x := range []struct {
			b   *Buffer
			n   int
			rnd Rounding
		}{{dq, qn, c.dq}, {dk, kn, c.dk}, {dv, kn, c.dv}} {
			if err := ks.Round(r, x.b, x.n, x.rnd); err != nil {
				return out, err
			}
		}
	}
	if err := r.Submit(); err != nil {
		return out, err
	}
	out = attnOutputs{make([]float32, qn), make([]float32, s.StatsLen()), make([]float32, qn), make([]float32, kn), make([]float32, kn)}
	for _, x := range []struct {
		b  *Buffer
		xs []float32
	}{{o, out.o}, {stats, out.stats}, {dq, out.dq}, {dk, out.dk}, {dv, out.dv}} {
		if err := x.b.ReadFloat32(0, x.xs); err != nil {
			return out, err
		}
	}
	return out, nil
}

// attnCompare holds every value of got to the reference within slack
// times its bound. It returns the worst error as a fraction of the bound
// (values with a zero bound must be exact) and how many of the n values
// are not the reference's own (a rounding point of the kernel's landed on
// the other side of a boundary that lies within the value's error).
func attnCompare(ref attnRefResult, got attnOutputs, slack float64) (worst float64, differ, n int, err error) {
	for _, t := range []struct {
		name string
		ref  attnBounded
		got  []float32
	}{{"O", ref.o, got.o}, {"stats", ref.stats, got.stats}, {"dQ", ref.dq, got.dq}, {"dK", ref.dk, got.dk}, {"dV", ref.dv, got.dv}} {
		for i, want := range t.ref.want {
			e, b := math.Abs(float64(t.got[i])-want), slack*t.ref.bound[i]
			if !(e <= b) {
				return worst, differ, n, fmt.Errorf("%s[%d] = %g, want %g ± %.3g", t.name, i, t.got[i], want, b)
			}
			if b > 0 {
				worst = max(worst, e/b)
			}
			if e != 0 {
				differ++
			}
			n++
		}
	}
	return worst, differ, n, nil
}
