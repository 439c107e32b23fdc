package blas

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/cpufeat"
	"github.com/mixtune/mixtune/internal/par"
)

// NativeBF16 is mixtune's own bf16 GEMM, for machines without oneDNN: an
// AMX-BF16 micro-kernel in Go assembly where the CPU has AMX and the OS
// grants it, else a VDPBF16PS one (AVX512_BF16). This comment describes
// the VDPBF16PS kernel; amxMicro says where the AMX kernel differs (a
// 32×32 tile, k in steps of 16 pairs, TDPBF16PS's sums).
//
// It is blocked as the fp32 kernel is. op(B) is packed once per call (or
// once for good: PackB) in panels of 32 columns, as pairs of bf16 values
// along k (a zero pads an odd k); a block of up to bf16NC columns of it is
// shared by the workers, each slice of bf16KCP pairs of that block staying
// in L2. Each worker packs a strip of 14 rows of op(A) for one slice into
// L1 and runs the 14×32 kernel across the block's panels, its 28 zmm
// accumulators taking one VDPBF16PS per pair and 16 columns. Operands
// given as float32 are rounded to bf16 (nearest even) as they are packed:
// no converted copy is made.
//
// Each element of C is one sum from zero over the pairs in order, as the
// instruction computes it: odd element of a pair first, each product
// added with one fp32 rounding (round to nearest even), denormal inputs
// read as zero and denormal sums flushed to zero. A sum that spans several
// k slices is carried in fp32 from one to the next, so the slicing, the
// blocking and the worker count never change a bit. Then C = alpha·sum +
// beta·C in float32.
type NativeBF16 struct {
	workers int
	// micro is the kernel and its geometry (vdpMicro, amxMicro); the
	// tests put a Go model of the kernel here to check the driver on any
	// CPU.
	micro bf16Micro
	name  string
}

// bf16Micro is a micro-kernel of NativeBF16 and how the driver feeds it.
type bf16Micro struct {
	// mr is the rows of C a kernel call computes (the columns: bf16NR).
	mr int
	// kStep is the pairs the kernel takes at a time: the pairs of a k
	// slice and of a packed panel of op(B) are a multiple of it, zeros
	// padding k.
	kStep int
	kern  bf16Kernel
	// roundsC says kern takes bf16Round: it rounds C to bf16 as it
	// stores it. Otherwise the driver rounds each finished tile.
	roundsC bool
	// packA packs rows [i0, i0+mr) of op(A) over pairs [pc, pc+kc) into
	// ap (kc·mr dwords) as kern reads them, zero past m and past k.
	packA func(ap []uint32, transA bool, a *BF16Matrix, k, m, i0, pc, kc int)
}

// vdpMicro is the VDPBF16PS kernel: 14×32, a pair at a time, op(A)'s
// strip pair-major (packStripA).
var vdpMicro = bf16Micro{mr: bf16MR, kStep: 1, kern: bf16KernelAsm, packA: packStripA, roundsC: true}

// bf16Kernel computes one mr×bf16NR tile over kcp pairs, as
// dpbf16K14x32 (native_bf16_amd64.s) and amxK32x32 (native_amx_amd64.s)
// say: the accumulators start from zero or, with mode&bf16Load, from acc
// (mr rows of bf16NR floats);
// then the sums go back to acc or, with mode&bf16Final, C (row stride ldc)
// = alpha·sum (+ beta·C with mode&bf16ReadC) as scaleBF16Sum rounds it,
// and, with mode&bf16Round (a kernel whose bf16Micro.roundsC), rounded
// to bf16 as amp rounds.
type bf16Kernel func(kcp int, a, b []uint32, acc, c []float32, ldc int, alpha, beta float32, mode int)

// The kernel's modes.
const (
	bf16Load  = 1 // start from the sums in acc
	bf16Final = 2 // write alpha·sum (+ beta·C) to C, not the sums to acc
	bf16ReadC = 4 // with bf16Final: add beta·C
	bf16Round = 8 // with bf16Final: C rounded to bf16
)

// Blocking. A 14-row strip of packed op(A) over one slice (14·256 dwords,
// 14 KiB) stays in L1 while the kernel walks the block's panels of op(B);
// one slice of a block (256 pairs × up to 1024 columns, 1 MiB) stays in
// L2. Each block converts and packs the strips of op(A) again, so blocks
// are as wide as L2 allows.
const (
	bf16MR  = 14
	bf16NR  = 32
	bf16KCP = 256
	bf16NC  = 1024

	// bf16ParallelWork is the smallest m·n·k per worker worth handing to
	// another goroutine (nativeParallelWork's reasoning).
	bf16ParallelWork = 1 << 20
	// bf16UnitsPerWorker is how many pieces of C each worker gets on
	// average, claimed as workers come free.
	bf16UnitsPerWorker = 4
)

// errNoVDPBF16PS is NewNativeBF16's answer where no kernel can run.
var errNoVDPBF16PS = errors.New("CPU lacks AVX512_BF16 (VDPBF16PS) and usable AMX-BF16")

// NewNativeBF16 returns the AMX kernel where features f say the CPU has
// AMX-BF16, the OS granted the tile state and the CPU has AVX-512F (the
// kernel's epilogue), else the VDPBF16PS kernel where f has AVX512_BF16;
// the kernels are built on amd64 only. Nothing here executes an AMX or
// AVX-512 instruction: f alone decides, so a CPU or OS without them never
// reaches one. workers goroutines share a large product (0: GOMAXPROCS).
func NewNativeBF16(f cpufeat.Features, workers int) (*NativeBF16, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if f.AMX() && f.AVX512F && haveAMXKernel {
		return &NativeBF16{workers: workers, micro: amxMicro, name: "native (Go, AMX-BF16 TDPBF16PS kernel)"}, nil
	}
	if !f.AVX512BF16 {
		if f.AMXBF16 && !f.AMXPermitted {
			return nil, fmt.Errorf("%w (the OS did not grant the AMX tile state)", errNoVDPBF16PS)
		}
		return nil, errNoVDPBF16PS
	}
	if !haveBF16Kernel {
		return nil, errors.New("the VDPBF16PS kernel is amd64 assembly, not built here (GOARCH=" + runtime.GOARCH + ", or the purego tag)")
	}
	return &NativeBF16{workers: workers, micro: vdpMicro, name: "native (Go, AVX512_BF16 VDPBF16PS kernel)"}, nil
}

// bf16KernelAsm is bf16Kernel on dpbf16K14x32, bound-checking all the
// assembly touches.
func bf16KernelAsm(kcp int, a, b []uint32, acc, c []float32, ldc int, alpha, beta float32, mode int) {
	_ = a[kcp*bf16MR-1]
	_ = b[kcp*bf16NR-1]
	_ = acc[bf16MR*bf16NR-1]
	if mode&bf16Final != 0 {
		_ = c[(bf16MR-1)*ldc+bf16NR-1]
	}
	dpbf16K14x32(kcp, &a[0], &b[0], &acc[0], &c[0], ldc, alpha, beta, mode)
}

// Name says which kernel runs: AMX-BF16 or AVX512_BF16.
func (nb *NativeBF16) Name() string { return nb.name }

// BF16Matrix is an operand of a bf16 product: bf16 bit patterns, or
// float32 values rounded to bf16 (nearest even, a NaN kept a NaN) as they
// are packed, row-major with row stride Ld.
type BF16Matrix struct {
	Bits []uint16
	F32  []float32
	Ld   int
}

// len is how many elements the operand holds.
func (x BF16Matrix) len() int {
	if x.F32 != nil {
		return len(x.F32)
	}
	return len(x.Bits)
}

// PackedBF16 is op(B) of a NativeBF16 product packed once, for a matrix
// many products read unchanged (a frozen weight): k×n, in panels of 32
// columns, panel q at data[q·kp·32:], pair p of its column j at p·32+j,
// kp being k's pairs padded with zero pairs to a multiple of the kernel's
// step (1 pair for VDPBF16PS, 16 for AMX: a panel packed for one kernel
// is refused by the other). It is read-only once made, and about as large
// as op(B) in bf16.
type PackedBF16 struct {
	k, n, kp int
	data     []uint32
	buf      []uint32 // data's allocation, which data starts 64-byte aligned in
}

// Dims returns op(B)'s rows (k) and columns (n).
func (p *PackedBF16) Dims() (k, n int) { return p.k, p.n }

// Bytes is the memory it holds.
func (p *PackedBF16) Bytes() int { return 4 * cap(p.buf) }

// PackB packs op(B) (k×n; B is n×k when transB) for Gemm, into into's
// memory where it is large enough (into may be nil).
func (nb *NativeBF16) PackB(into *PackedBF16, transB bool, k, n int, b BF16Matrix) *PackedBF16 {
	rows, cols := k, n
	if transB {
		rows, cols = n, k
	}
	if b.Ld < max(1, cols) || (rows > 0 && cols > 0 && b.len() < (rows-1)*b.Ld+cols) {
		panic(fmt.Sprintf("blas: native PackB: %d×%d B with row stride %d in %d elements", rows, cols, b.Ld, b.len()))
	}
	kp := roundUp((k+1)/2, nb.micro.kStep)
	panels := (n + bf16NR - 1) / bf16NR
	p := &PackedBF16{k: k, n: n, kp: kp}
	var buf []uint32
	if into != nil {
		buf = into.buf
	}
	p.data = alignU32(&buf, panels*kp*bf16NR)
	p.buf = buf
	work := max(1, int(int64(kp)*int64(n)/(1<<16)))
	parallelRange(min(nb.workers, panels, work), panels, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			packPanelB(p.data[q*kp*bf16NR:(q+1)*kp*bf16NR], transB, &b, k, n, q*bf16NR)
		}
	})
	return p
}

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C with A and B bf16 bits
// and C float32 (row-major); beta = 0 does not read C.
func (nb *NativeBF16) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	nb.Gemm(transA, transB, m, n, k, alpha, BF16Matrix{Bits: a, Ld: lda}, BF16Matrix{Bits: b, Ld: ldb}, nil, beta, c, ldc, nil)
}

// Gemm is GemmBF16 with operands given as bits or float32 (BF16Matrix),
// op(B) packed in advance where pb is not nil (b and transB are then
// ignored), and done, when not nil, called on each block of C once it is
// final (see Finisher), from the worker that computed it.
func (nb *NativeBF16) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b BF16Matrix, pb *PackedBF16, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	nb.gemm(false, BandFull, transA, transB, m, n, k, alpha, a, b, pb, beta, c, ldc, done)
}

// Band is the part of a square product a causal mask leaves (attention's,
// row i of op(A) and of C being query i, column j of C key j), so that
// GemmBand skips the rest: whole 14×32 tiles of C, and the pairs of k
// outside a strip of op(A)'s rows' nonzero span.
type Band int

const (
	// BandFull is every element: Gemm.
	BandFull Band = iota
	// BandLowerC wants only C[i][j] with j ≤ i (the scores, dP): a tile
	// wholly above the diagonal is neither computed nor written.
	BandLowerC
	// BandLowerA has op(A)[i][kk] = 0 for kk > i (P·V, dS·K).
	BandLowerA
	// BandUpperA has op(A)[i][kk] = 0 for kk < i (Pᵀ·dO, dSᵀ·Q).
	BandUpperA
)

// GemmBand is Gemm on a product whose operands or wanted output follow
// band. The pairs it skips are products with a zero from op(A), which
// the sum would add as +0 or −0: each element it writes has Gemm's bits
// except that a sum that is exactly zero may come out +0 where Gemm's is
// −0, and that an infinity or NaN in op(B) where op(A) is zero does not
// reach C (Gemm makes it NaN).
func (nb *NativeBF16) GemmBand(band Band, transA, transB bool, m, n, k int, alpha float32, a, b BF16Matrix, beta float32, c []float32, ldc int) {
	nb.gemm(false, band, transA, transB, m, n, k, alpha, a, b, nil, beta, c, ldc, nil)
}

// GemmBandRound is GemmBand with beta 0 whose C, alpha·op(A)·op(B), is
// rounded to bf16 as GemmRound rounds it: as each tile is stored, and
// never to zero.
func (nb *NativeBF16) GemmBandRound(band Band, transA, transB bool, m, n, k int, alpha float32, a, b BF16Matrix, c []float32, ldc int) {
	nb.gemm(true, band, transA, transB, m, n, k, alpha, a, b, nil, 0, c, ldc, nil)
}

// GemmRound is Gemm with alpha 1 and beta 0 whose C is rounded to bf16
// (nearest even, a NaN kept a quiet NaN: amp's rounding) as each tile is
// stored, while it is in registers or in cache, not in a pass of its
// own. No value of C rounds to zero: both kernels flush sums below
// float32's smallest normal, 2^-126, to zero, and bf16 has float32's
// exponent range (amp.Format.Underflows of C is 0), so a gradient
// rounded here loses nothing to underflow. done, when not nil, is
// called on each block of C once it is final and rounded (see Gemm).
func (nb *NativeBF16) GemmRound(transA, transB bool, m, n, k int, a, b BF16Matrix, pb *PackedBF16, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	nb.gemm(true, BandFull, transA, transB, m, n, k, 1, a, b, pb, 0, c, ldc, done)
}

// roundRows rounds C's rows [i0, i1) over columns [j0, j1) to bf16: a
// tile the kernel did not round.
func roundRows(c []float32, ldc, i0, i1, j0, j1 int) {
	for i := i0; i < i1; i++ {
		amp.BF16.RoundSlice(c[i*ldc+j0 : i*ldc+j1])
	}
}

// gemm is Gemm, GemmBand, GemmRound and GemmBandRound: roundC rounds C
// to bf16 as each tile is stored (by the kernel where its micro.roundsC,
// else by roundRows as the driver finishes the tile).
func (nb *NativeBF16) gemm(roundC bool, band Band, transA, transB bool, m, n, k int, alpha float32, a, b BF16Matrix, pb *PackedBF16, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	bTrans := transB // op(B)'s layout in b, before a packed op(B) overrides it
	lb, ldb := b.len(), b.Ld
	if pb != nil {
		if pb.k != k || pb.n != n {
			panic(fmt.Sprintf("blas: native bf16 Gemm: op(B) packed as %d×%d, the product needs %d×%d", pb.k, pb.n, k, n))
		}
		if want := roundUp((k+1)/2, nb.micro.kStep); pb.kp != want {
			panic(fmt.Sprintf("blas: native bf16 Gemm: op(B) packed in %d pairs for another kernel, %s needs %d", pb.kp, nb.name, want))
		}
		transB, lb, ldb = false, k*n, max(1, n)
	}
	if trivialGemm("native bf16 Gemm", transA, transB, m, n, k, a.len(), a.Ld, lb, ldb, beta, c, ldc) {
		if roundC && m > 0 && n > 0 {
			roundRows(c, ldc, 0, m, 0, n)
		}
		if done != nil && m > 0 && n > 0 {
			done(0, m, 0, n)
		}
		return
	}
	if band == BandFull && beta == 0 && n <= bf16ThinN && m >= 4*n && b.len() > 0 {
		nb.gemmTransposed(transA, bTrans, m, n, k, alpha, a, b, c, ldc, nil)
		if roundC {
			roundRows(c, ldc, 0, m, 0, n)
		}
		if done != nil {
			done(0, m, 0, n)
		}
		return
	}
	kp := roundUp((k+1)/2, nb.micro.kStep)
	ns := (kp + bf16KCP - 1) / bf16KCP
	g := &bf16Gemm{micro: nb.micro, band: band, transA: transA, transB: transB, m: m, n: n, k: k, kp: kp, kcp: roundUp((kp+ns-1)/ns, nb.micro.kStep),
		alpha: alpha, beta: beta, a: a, b: b, c: c, ldc: ldc, done: done, roundC: roundC}
	workers := nb.workers
	if w := int64(m) * int64(n) * int64(k) / bf16ParallelWork; w < int64(workers) {
		workers = int(max(1, w))
	}
	if workers > 1 && par.Busy() {
		// inside another region (attention's heads): the pieces run in
		// turn on this goroutine anyway, and one worker claims them
		// without a locked add after each (block)
		workers = 1
	}
	var bufs *bf16Buffers
	if pb == nil {
		bufs = bf16Pool.Get().(*bf16Buffers)
		defer bf16Pool.Put(bufs)
	}
	// column blocks of nearly equal size, whole panels, at most bf16NC
	nblk := (n + bf16NC - 1) / bf16NC
	ncb := ((n+nblk-1)/nblk + bf16NR - 1) / bf16NR * bf16NR
	for jc := 0; jc < n; jc += ncb {
		nc := min(ncb, n-jc)
		panels := (nc + bf16NR - 1) / bf16NR
		var bp []uint32 // panel q of the block at bp[q·kp·32:]
		if pb != nil {
			bp = pb.data[jc/bf16NR*kp*bf16NR:]
		} else {
			bp = alignU32(&bufs.b, panels*kp*bf16NR)
			parallelRange(min(workers, panels), panels, func(lo, hi int) {
				for q := lo; q < hi; q++ {
					packPanelB(bp[q*kp*bf16NR:(q+1)*kp*bf16NR], g.transB, &g.b, k, n, jc+q*bf16NR)
				}
			})
		}
		g.block(workers, bp, jc, panels)
	}
}

// bf16ThinN is the widest op(B) gemmTransposed takes: one strip of the
// kernel's rows.
const bf16ThinN = bf16MR

// gemmTransposed computes a thin product (n ≤ bf16ThinN, m ≥ 4n: LoRA's,
// n being the adapter's rank) as Cᵀ = op(B)ᵀ·op(A)ᵀ into scratch, then
// copies it into C (beta = 0) and calls done on the whole of C. The
// rank then fills 8 of a strip's 14 rows rather than 8 of a panel's 32
// columns: 2.3 times less kernel work at rank 8. Each element is the same
// sum of the same products in the same order (the product of two bf16
// values is the same either way round), so C has Gemm's bits.
func (nb *NativeBF16) gemmTransposed(transA, transB bool, m, n, k int, alpha float32, a, b BF16Matrix, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	bufs := bf16Pool.Get().(*bf16Buffers)
	defer bf16Pool.Put(bufs)
	ct := alignF32(&bufs.ct, n*m)
	nb.gemm(false, BandFull, !transB, !transA, n, m, k, alpha, b, a, nil, 0, ct, m, nil)
	_ = c[(m-1)*ldc+n-1]
	for j := 0; j < n; j++ {
		col := ct[j*m : (j+1)*m]
		for i, v := range col {
			c[i*ldc+j] = v
		}
	}
	if done != nil {
		done(0, m, 0, n)
	}
}

// bf16Gemm is one product, shared read-only by its workers.
type bf16Gemm struct {
	micro          bf16Micro
	band           Band
	transA, transB bool
	m, n, k        int
	kp, kcp        int // pairs along k (padded to micro.kStep), and per slice
	alpha, beta    float32
	a, b           BF16Matrix
	c              []float32
	ldc            int
	done           func(i0, i1, j0, j1 int)
	roundC         bool // C rounded to bf16 as it is stored (gemm)
}

// block computes columns [jc, jc+32·panels) of C from the packed panels
// bp, split into strips of micro.mr rows (and, with few strips, groups of
// panels) that workers claim as they come free.
func (g *bf16Gemm) block(workers int, bp []uint32, jc, panels int) {
	mr := g.micro.mr
	strips := (g.m + mr - 1) / mr
	groups := 1
	if want := bf16UnitsPerWorker * workers; workers > 1 && strips < want {
		groups = min(panels, (want+strips-1)/strips)
	}
	units := strips * groups
	run := func(bufs *bf16Buffers, next func() int) {
		ap := alignU32(&bufs.a, g.kcp*mr)
		acc := alignF32(&bufs.acc, (panels+groups-1)/groups*mr*bf16NR)
		for {
			u := next()
			if u >= units {
				return
			}
			s, grp := u/groups, u%groups
			g.unit(ap, acc, bp, s*mr, jc, panels*grp/groups, panels*(grp+1)/groups)
		}
	}
	if workers = min(workers, units); workers == 1 {
		// no claims: a locked add waits for the stores before it, the
		// tile of C just written, to drain (attention's products, one
		// worker each, make thousands of them a step)
		bufs := bf16Pool.Get().(*bf16Buffers)
		defer bf16Pool.Put(bufs)
		u := -1
		run(bufs, func() int { u++; return u })
		return
	}
	var next atomic.Int64
	nativeParallel(workers, func() {
		bufs := bf16Pool.Get().(*bf16Buffers)
		defer bf16Pool.Put(bufs)
		run(bufs, func() int { return int(next.Add(1)) - 1 })
	})
}

// unit computes the strip of rows [i0, i0+micro.mr) of C by panels [q0, q1) of
// the block at column jc: slice by slice, the strip of op(A) packed into
// ap once per slice, each tile's sums carried in acc between slices.
func (g *bf16Gemm) unit(ap []uint32, acc []float32, bp []uint32, i0, jc, q0, q1 int) {
	mr, step := g.micro.mr, g.micro.kStep
	i1 := min(i0+mr, g.m)
	p0, p1 := 0, g.kp // the pairs the strip's rows of op(A) may be nonzero in
	switch g.band {
	case BandLowerC: // the panels holding a column j ≤ i1-1
		q1 = min(q1, (i1-1-jc)/bf16NR+1)
		if i1-1 < jc || q0 >= q1 {
			return
		}
	case BandLowerA: // kk ≤ i1-1
		p1 = min(g.kp, roundUp((i1-1)/2+1, step))
	case BandUpperA: // kk ≥ i0
		p0 = i0 / 2 / step * step
	}
	if p0 >= p1 { // every product is zero: C = alpha·0 (+ beta·C), as the sum from zero gives
		for i := i0; i < i1; i++ {
			row := g.c[i*g.ldc+jc+q0*bf16NR : i*g.ldc+min(jc+q1*bf16NR, g.n)]
			for j := range row {
				row[j] = scaleBF16Sum(g.alpha, g.beta, 0, row[j])
			}
		}
		if g.roundC {
			roundRows(g.c, g.ldc, i0, i1, jc+q0*bf16NR, min(jc+q1*bf16NR, g.n))
		}
	}
	for pc := p0; pc < p1; pc += g.kcp {
		kc := min(g.kcp, p1-pc)
		g.micro.packA(ap[:kc*mr], g.transA, &g.a, g.k, g.m, i0, pc, kc)
		last := pc+kc == p1
		for q := q0; q < q1; q++ {
			j0 := jc + q*bf16NR
			j1 := min(j0+bf16NR, g.n)
			tile := acc[(q-q0)*mr*bf16NR : (q-q0+1)*mr*bf16NR]
			bpan := bp[q*g.kp*bf16NR+pc*bf16NR : q*g.kp*bf16NR+(pc+kc)*bf16NR]
			mode := 0
			if pc > p0 {
				mode = bf16Load
			}
			if last && i1-i0 == mr && j1-j0 == bf16NR {
				mode |= bf16Final
				if g.beta != 0 {
					mode |= bf16ReadC
				}
				if g.roundC && g.micro.roundsC {
					mode |= bf16Round
				}
				g.micro.kern(kc, ap, bpan, tile, g.c[i0*g.ldc+j0:], g.ldc, g.alpha, g.beta, mode)
				if g.roundC && !g.micro.roundsC {
					roundRows(g.c, g.ldc, i0, i1, j0, j1)
				}
				continue
			}
			g.micro.kern(kc, ap, bpan, tile, tile, bf16NR, 1, 0, mode)
			if last { // a partial tile: its corner of the sums into C
				g.partialTile(tile, i0, i1, j0, j1)
				if g.roundC {
					roundRows(g.c, g.ldc, i0, i1, j0, j1)
				}
			}
		}
	}
	if g.done != nil {
		g.done(i0, i1, jc+q0*bf16NR, min(jc+q1*bf16NR, g.n))
	}
}

// partialTile writes the corner rows [i0, i1) × columns [j0, j1) of a
// tile's sums into C as the kernel's final mode would: alpha·sum (+
// beta·C). With alpha = 1 and beta = 0, the usual case, that is the sum
// itself (1·x is x for every float32), copied row by row.
func (g *bf16Gemm) partialTile(tile []float32, i0, i1, j0, j1 int) {
	for i := i0; i < i1; i++ {
		row := g.c[i*g.ldc+j0 : i*g.ldc+j1]
		sums := tile[(i-i0)*bf16NR : (i-i0)*bf16NR+len(row)]
		switch {
		case g.alpha == 1 && g.beta == 0:
			copy(row, sums)
		case g.beta == 0:
			for j, s := range sums {
				row[j] = g.alpha * s
			}
		default:
			for j := range row {
				row[j] = scaleBF16Sum(g.alpha, g.beta, sums[j], row[j])
			}
		}
	}
}

// bf16Buffers are one worker's packing buffers, recycled through a pool:
// a strip of op(A), the sums of its tiles, a block of op(B), and a thin
// product's transposed C.
type bf16Buffers struct {
	a, b    []uint32
	acc, ct []float32 // ct: a thin product's Cᵀ (gemmTransposed)
}

var bf16Pool = sync.Pool{New: func() any { return new(bf16Buffers) }}

// alignU32 returns n dwords of *p starting on a 64-byte boundary, growing
// *p as needed.
func alignU32(p *[]uint32, n int) []uint32 {
	const pad = 16
	if cap(*p) < n+pad {
		*p = make([]uint32, n+pad)
	}
	buf := (*p)[:cap(*p)]
	off := (pad - int(uintptr(unsafe.Pointer(&buf[0]))&63)/4) % pad
	return buf[off : off+n]
}

// alignF32 is alignU32 for float32.
func alignF32(p *[]float32, n int) []float32 { return nativeAlign(p, n) }

// packStripA packs rows [i0, i0+14) of op(A) (m×k) over pairs [pc, pc+kc)
// into ap: ap[p·14+r] = op(A)[i0+r][2(pc+p)] | op(A)[i0+r][2(pc+p)+1]<<16,
// zero past m and past k.
func packStripA(ap []uint32, transA bool, a *BF16Matrix, k, m, i0, pc, kc int) {
	packPairs(ap, bf16MR, a, !transA, k, i0, min(bf16MR, m-i0), pc, kc)
}

// packPanelB packs columns [j0, j0+32) of op(B) (k×n) over all pairs into
// bp (len(bp)/32 pairs, at least (k+1)/2): bp[p·32+j] = op(B)[2p][j0+j] |
// op(B)[2p+1][j0+j]<<16, zero past n and past k.
func packPanelB(bp []uint32, transB bool, b *BF16Matrix, k, n, j0 int) {
	kp := (k + 1) / 2
	packPairs(bp, bf16NR, b, transB, k, j0, min(bf16NR, n-j0), 0, kp)
	clear(bp[kp*bf16NR:])
}

// packPairs packs lines [l0, l0+lines) of the operand x, whose line l
// holds x(l, kk) for kk < k (k its length), over pairs [p0, p0+np) into
// dst[p·width+l] = x(l0+l, 2(p0+p)) | x(l0+l, 2(p0+p)+1)<<16, with zeros
// past the lines (up to width) and past k. x(l, kk) is x[l·ld+kk] where
// lines are contiguous along k, else x[kk·ld+l]. float32 values are
// rounded to bf16 here.
func packPairs(dst []uint32, width int, x *BF16Matrix, kContiguous bool, k, l0, lines, p0, np int) {
	dst = dst[:np*width]
	if lines < width { // the padding lines are zeros: all of dst cleared at once, then the lines written
		clear(dst)
	}
	pairs := min(np, k/2-p0) // whole pairs; then maybe one with an odd k's last element
	odd := k%2 == 1 && p0+np == (k+1)/2
	ld := x.Ld
	if kContiguous {
		whole := 0 // the whole pairs of every line packed 16 lines at a time
		switch {
		case x.F32 != nil:
			whole = packLinesF32(dst, width, x.F32, ld, l0*ld+2*p0, lines, pairs)
		case width > 1:
			whole = packLinesBits(dst, width, x.Bits, ld, l0*ld+2*p0, lines, pairs)
		}
		for l := 0; l < lines; l++ {
			off := (l0+l)*ld + 2*p0
			if x.F32 != nil {
				row := x.F32[off : off+2*pairs+btoi(odd)]
				p := whole
				if p == 0 {
					p = packRowPairsF32(dst[l:], width, row, pairs)
				}
				for ; p < pairs; p++ {
					dst[p*width+l] = uint32(amp.BF16Bits(row[2*p])) | uint32(amp.BF16Bits(row[2*p+1]))<<16
				}
				if odd {
					dst[pairs*width+l] = uint32(amp.BF16Bits(row[2*pairs]))
				}
				continue
			}
			row := x.Bits[off : off+2*pairs+btoi(odd)]
			if width == 1 && pairs > 0 { // a run of pairs is the row's bytes (little endian)
				copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[l])), 4*pairs), unsafe.Slice((*byte)(unsafe.Pointer(&row[0])), 4*pairs))
			} else {
				for p := whole; p < pairs; p++ {
					dst[p*width+l] = uint32(row[2*p]) | uint32(row[2*p+1])<<16
				}
			}
			if odd {
				dst[pairs*width+l] = uint32(row[2*pairs])
			}
		}
		return
	}
	first := 0 // the pairs the vector routine leaves
	if x.F32 != nil && interleavePairsF32(dst, width, x.F32[2*p0*ld+l0:], ld, pairs, lines) {
		first = pairs
	}
	for p := first; p < pairs+btoi(odd); p++ { // rows 2(p0+p) and 2(p0+p)+1 of x hold the pair of every line
		out := dst[p*width : p*width+lines]
		e := 2 * (p0 + p) * ld
		if x.F32 != nil {
			even := x.F32[e+l0 : e+l0+lines]
			if p == pairs { // an odd k's last element
				for l, v := range even {
					out[l] = uint32(amp.BF16Bits(v))
				}
				continue
			}
			oddRow := x.F32[e+ld+l0 : e+ld+l0+lines]
			for l := interleaveF32(out, even, oddRow); l < lines; l++ {
				out[l] = uint32(amp.BF16Bits(even[l])) | uint32(amp.BF16Bits(oddRow[l]))<<16
			}
			continue
		}
		even := x.Bits[e+l0 : e+l0+lines]
		if p == pairs {
			for l, v := range even {
				out[l] = uint32(v)
			}
			continue
		}
		oddRow := x.Bits[e+ld+l0 : e+ld+l0+lines]
		for l := interleaveBits(out, even, oddRow); l < lines; l++ {
			out[l] = uint32(even[l]) | uint32(oddRow[l])<<16
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parallelRange runs fn over [0, items) in contiguous ranges on up to
// workers goroutines (one: on the caller's).
func parallelRange(workers, items int, fn func(lo, hi int)) {
	if workers <= 1 {
		fn(0, items)
		return
	}
	par.Run(workers, func(w int) { fn(w*items/workers, (w+1)*items/workers) })
}

// scaleBF16Sum is alpha·sum + beta·c in float32, each product rounded
// (never fused); beta = 0 does not read c, and alpha = 1 keeps sum.
func scaleBF16Sum(alpha, beta, sum, c float32) float32 {
	if beta == 0 {
		return float32(alpha * sum)
	}
	return float32(alpha*sum) + float32(beta*c)
}
