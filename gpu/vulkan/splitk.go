package vulkan

import (
	"fmt"
	"math"
)

// Split-K for products whose C has few tiles and whose K is long: the
// LoRA adapters' thin products (x·Aᵀ with N = rank, dA = (dY·B)ᵀ·x with
// M = rank, dB = dYᵀ·u with N = rank, over K = the tokens or the model's
// width) launch ⌈M/64⌉·⌈N/64⌉ workgroups, 32 at TinyLlama's shape, and
// leave most of a large GPU idle. Split-K cuts K into chunks, runs one
// workgroup per tile and chunk (gemm.comp built with -DSPLITK), each
// writing its chunk's raw sums to a scratch buffer, then adds the chunks
// in a fixed order, 0, 1, …, and applies α, β to C
// (gemm_splitk_reduce.comp): deterministic, and the same bits on every
// run and thread count.
//
// The split depends on the shape alone, never on timing or on the
// device: a product is split into chunks of K to reach about
// splitKGroups workgroups, each chunk at least splitKMinChunk long, and
// only when C has at most splitKMaxTiles tiles. So the summation order,
// and the result's bits, are the same on every device that rounds fp32
// fmas and additions correctly.
//
// Error: each chunk's sum of at most c products is within γ_c of its
// Σ|a||b|, the S chunks' sums add S−1 roundings, then α and the fma
// with β·C one each: every element is within γ_{c+S+1}·(|α|Σ|a||b| +
// |βc|) of the exact value, never more than one pass's γ_{K+2}, since
// c + S − 1 ≤ K.
const (
	splitKGroups   = 512 // the workgroups a split product aims for: ~4 per SM on a 132-SM H100
	splitKMinChunk = 128 // the fewest K values a chunk walks (8 steps of gemm.comp's 16)
	splitKMaxTiles = 128 // C with more 64×64 tiles than this is never split automatically
	splitKTile     = 64  // the scalar variant's tile of C, M and N
	splitKStep     = 16  // gemm.comp's K step: automatic chunks are multiples of it
	splitKPush     = gemmPush + 4
	splitKRedPush  = 7 * 4
)

// SplitK is how Gemm splits g's K: into chunks chunks of chunk values
// each (the last may be shorter), or, when chunks is 1, not at all. With
// g.Splits 0 it is chosen from the shape (see above), unless the kernels
// were built with KernelOptions.NoSplitK; with g.Splits > 1 chunk is
// ⌈K/Splits⌉ and chunks ⌈K/chunk⌉ (at most Splits).
func (ks *Kernels) SplitK(g GemmArgs) (chunks, chunk int) {
	if g.Q4 != nil || g.K <= 1 || g.M <= 0 || g.N <= 0 || g.Splits == 1 || g.Splits < 0 {
		return 1, g.K
	}
	if g.Splits > 1 {
		chunk = (g.K + g.Splits - 1) / g.Splits
		return (g.K + chunk - 1) / chunk, chunk
	}
	if ks.noSplitK {
		return 1, g.K
	}
	tiles := ((g.M + splitKTile - 1) / splitKTile) * ((g.N + splitKTile - 1) / splitKTile)
	if tiles > splitKMaxTiles {
		return 1, g.K
	}
	s := min((splitKGroups+tiles-1)/tiles, g.K/splitKMinChunk)
	if s < 2 {
		return 1, g.K
	}
	chunk = (g.K + s - 1) / s
	chunk = (chunk + splitKStep - 1) / splitKStep * splitKStep
	return (g.K + chunk - 1) / chunk, chunk
}

// gemmSplitK records g (checked by Gemm) as chunks products over K's
// chunks of chunk values into the recorder's scratch, then their ordered
// sum into C.
func (ks *Kernels) gemmSplitK(r *Recorder, g GemmArgs, chunks, chunk int) error {
	v := ks.Variant
	file := v.SplitF32
	if g.B16 {
		file = v.SplitB16
	}
	if file == "" {
		return fmt.Errorf("split-K: the %s variant has no split-K build", v.Name)
	}
	if lim := r.d.Physical.MaxWorkgroupCount[2]; uint64(chunks) > uint64(lim) {
		return fmt.Errorf("split-K: %d chunks of K exceed the device's %d workgroups in z", chunks, lim)
	}
	mn := uint64(g.M) * uint64(g.N)
	if mn*uint64(chunks) > math.MaxUint32 {
		return fmt.Errorf("split-K: %d chunks of %d×%d values exceed the kernels' 32-bit indexing", chunks, g.M, g.N)
	}
	part, err := r.scratch(4 * mn * uint64(chunks))
	if err != nil {
		return fmt.Errorf("split-K scratch: %w", err)
	}
	k, err := ks.kernel(file, 3, splitKPush)
	if err != nil {
		return err
	}
	push := wordBytes(append(gemmWords(g), uint32(chunk)))
	gx, gy := (uint32(g.N)+splitKTile-1)/splitKTile, (uint32(g.M)+splitKTile-1)/splitKTile
	flops := 2 * float64(g.M) * float64(g.N) * float64(g.K)
	if err := r.dispatch(k, []*Buffer{g.A, g.B, part}, push, gx, gy, uint32(chunks), flops); err != nil {
		return err
	}
	red, err := ks.kernel("gemm_splitk_reduce.spv", 2, splitKRedPush)
	if err != nil {
		return err
	}
	return r.Dispatch(red, []*Buffer{part, g.C}, pushWords(g.M, g.N, chunks, g.Ldc, g.COff, g.Alpha, g.Beta), ks.groups1D(g.M*g.N), 1, 1)
}
