package vulkan

import (
	"fmt"
	"math"
)

// EmbeddingTable is the table operand of an embedding lookup: V rows of D
// values in Buf, float32, or 16-bit values of format Half when B16 is set
// (two to a word, as Buffer.WriteUint16 lays them out).
type EmbeddingTable struct {
	Buf  *Buffer
	V, D int
	B16  bool
	Half Half
}

// Embedding records y[r, :] = table[ids[r], :] for n int32 ids, widening a
// 16-bit table exactly. An id outside [0, V) gives a zero row: the caller
// checks ids it reads from the host.
func (ks *Kernels) Embedding(r *Recorder, ids *Buffer, t EmbeddingTable, y *Buffer, n int) error {
	wrap := func(err error) error {
		return fmt.Errorf("vulkan: Embedding of %d ids in %d×%d: %w", n, t.V, t.D, err)
	}
	if n < 0 || t.V <= 0 || t.D <= 0 {
		return wrap(fmt.Errorf("n must be ≥ 0, V and D > 0"))
	}
	if uint64(n)*uint64(t.D) > math.MaxUint32/2 || uint64(t.V)*uint64(t.D) > math.MaxUint32/2 {
		return wrap(fmt.Errorf("too many values for the kernel's 32-bit indexing"))
	}
	if t.B16 && t.Half != BF16 && t.Half != FP16 {
		return wrap(fmt.Errorf("unknown 16-bit format %d", t.Half))
	}
	if n == 0 {
		return nil
	}
	elem, file := 4, "embedding_f32.spv"
	if t.B16 {
		elem, file = 2, "embedding_b16.spv"
	}
	if err := extent("table", t.Buf, 0, t.V, t.D, t.D, elem); err != nil {
		return wrap(err)
	}
	if err := checkMatrices([]matrixCheck{{"ids", ids, 1, n}, {"y", y, n, t.D}}, 1); err != nil {
		return wrap(err)
	}
	if y == t.Buf {
		return wrap(fmt.Errorf("y must not share a buffer with the table"))
	}
	k, err := ks.kernel(file, 3, 4*4)
	if err != nil {
		return wrap(err)
	}
	push := pushWords(uint32(n*t.D), t.D, t.V, t.B16 && t.Half == FP16)
	if err := r.Dispatch(k, []*Buffer{ids, t.Buf, y}, push, ks.groups1D(n*t.D), 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}

// EmbeddingGradArgs describe the gradient of a [V, D] float32 table
// looked up by N int32 ids, from the output's gradient G [N, D]. Head (V
// int32 values) and Next (N) are scratch the kernel fills.
type EmbeddingGradArgs struct {
	N, V, D        int
	IDs, G, DTable *Buffer
	Head, Next     *Buffer
}

// EmbeddingGrad records DTable[v, :] = Σ G[r, :] over the positions r with
// IDs[r] = v, added in position order from +0 (rows never looked up are
// 0): nn's embedding backward, bit for bit, with no atomics.
func (ks *Kernels) EmbeddingGrad(r *Recorder, a EmbeddingGradArgs) error {
	wrap := func(err error) error {
		return fmt.Errorf("vulkan: EmbeddingGrad of %d ids into %d×%d: %w", a.N, a.V, a.D, err)
	}
	if a.N < 0 || a.V <= 0 || a.D <= 0 || a.N > math.MaxInt32 || a.V > math.MaxInt32 {
		return wrap(fmt.Errorf("N must be ≥ 0, V and D > 0"))
	}
	if uint64(a.N)*uint64(a.D) > math.MaxUint32/2 || uint64(a.V)*uint64(a.D) > math.MaxUint32/2 {
		return wrap(fmt.Errorf("too many values for the kernel's 32-bit indexing"))
	}
	checks := []matrixCheck{{"ids", a.IDs, 1, max(a.N, 1)}, {"g", a.G, max(a.N, 1), a.D},
		{"dtable", a.DTable, a.V, a.D}, {"head", a.Head, 1, a.V}, {"next", a.Next, 1, max(a.N, 1)}}
	if err := checkMatrices(checks, 2); err != nil {
		return wrap(err)
	}
	if a.DTable == a.Head || a.DTable == a.Next || a.Head == a.Next {
		return wrap(fmt.Errorf("dtable, head and next must be three buffers"))
	}
	k, err := ks.kernel("embedding_bwd.spv", 5, 4*4)
	if err != nil {
		return wrap(err)
	}
	bufs := []*Buffer{a.IDs, a.G, a.DTable, a.Head, a.Next}
	for mode, items := range []int{a.V, a.N, a.V * a.D} {
		push := pushWords(uint32(a.N), a.D, a.V, uint32(mode))
		if err := r.Dispatch(k, bufs, push, ks.groups1D(items), 1, 1); err != nil {
			return wrap(err)
		}
	}
	return nil
}
