package blas

// The AMX-BF16 kernel of NativeBF16 (amxK32x32, native_amx_amd64.s).
//
// A kernel call computes 32×32 of C as four 16×16 fp32 tiles, taking 16
// pairs along k per TDPBF16PS: a strip of op(A) is packed row-major, each
// row's pairs of a k slice contiguous (a tile row: 16 pairs, 64 bytes);
// op(B) is packed as for VDPBF16PS, panels of 32 columns with pair p of
// column j at p·32+j, which is the VNNI layout a B tile reads (16 pairs ×
// 16 columns, row stride 128 bytes). k's pairs are padded with zeros to a
// multiple of 16, in the slices and in the packed panels, so the kernel
// always runs full tiles; partial tiles of C are written back by the
// driver, as for the VDPBF16PS kernel.
//
// The sums are TDPBF16PS's (tdpbf16psModel): each instruction sums its 16
// pairs in two fp32 chains, one per element of the pair, adds the chains
// and then the result to C's element, each step rounded to nearest even
// with denormals read as zero and flushed. The slices are multiples of 16
// pairs and carried in fp32 from one to the next, so the blocking and the
// worker count never change a bit; the zero pairs that pad k add +0 to a
// chain.

// amxMR is the rows of C one AMX kernel call computes: two tiles of 16.
const amxMR = 32

// amxKStep is the pairs one TDPBF16PS takes: a tile row of 64 bytes.
const amxKStep = 16

// amxMicro is the AMX kernel and its geometry.
var amxMicro = bf16Micro{mr: amxMR, kStep: amxKStep, kern: amxKernelAsm, packA: packStripAAMX}

// amxKernelAsm is bf16Kernel on amxK32x32, bound-checking all the
// assembly touches.
func amxKernelAsm(kcp int, a, b []uint32, acc, c []float32, ldc int, alpha, beta float32, mode int) {
	if kcp <= 0 || kcp%amxKStep != 0 {
		panic("blas: AMX kernel: k slice not a positive multiple of 16 pairs")
	}
	_ = a[kcp*amxMR-1]
	_ = b[kcp*bf16NR-1]
	_ = acc[amxMR*bf16NR-1]
	if mode&bf16Final != 0 {
		_ = c[(amxMR-1)*ldc+bf16NR-1]
	}
	amxK32x32(kcp, &a[0], &b[0], &acc[0], &c[0], ldc, alpha, beta, mode)
}

// packStripAAMX packs rows [i0, i0+32) of op(A) (m×k) over pairs [pc,
// pc+kc) into ap row-major: ap[r·kc+p] = op(A)[i0+r][2(pc+p)] |
// op(A)[i0+r][2(pc+p)+1]<<16, zero past m and past k. Where A's rows run
// along k (not transA) each row packs as one contiguous run; otherwise
// (op(A) = Aᵀ, as dW = dyᵀ·x reads dy) two rows of A give one pair of 32
// lines at a time: in blocks of 8 pairs × 8 lines interleaved and
// transposed in registers (transposePairs, AVX2), and what is left (a
// partial strip, a slice's last pairs) 16 pairs at a time pair-major, as
// op(B) is packed, into a block that stays in L1 and is transposed into
// place.
func packStripAAMX(ap []uint32, transA bool, a *BF16Matrix, k, m, i0, pc, kc int) {
	ap = ap[:amxMR*kc]
	lines := min(amxMR, m-i0)
	inK := max(0, min(kc, (k+1)/2-pc)) // pairs of this slice within k
	if !transA {
		for r := 0; r < lines; r++ {
			row := ap[r*kc : (r+1)*kc]
			if inK > 0 {
				packPairs(row[:inK], 1, a, true, k, i0+r, 1, pc, inK)
			}
			clear(row[inK:])
		}
		clear(ap[lines*kc:])
		return
	}
	done := 0 // pairs packed by the vector routine: whole pairs of a full strip
	if lines == amxMR {
		done = transposePairs(ap, kc, *a, i0, pc, max(0, min(inK, k/2-pc)))
	}
	var blk [amxKStep * amxMR]uint32 // 16 pairs × 32 lines, pair-major
	for p0 := done; p0 < inK; p0 += amxKStep {
		np := min(amxKStep, inK-p0)
		packPairs(blk[:np*amxMR], amxMR, a, false, k, i0, lines, pc+p0, np)
		transposeBlock(ap[p0:], kc, blk[:np*amxMR], np)
	}
	for r := 0; r < amxMR; r++ {
		row := ap[r*kc : (r+1)*kc]
		if r >= lines {
			clear(row)
			continue
		}
		clear(row[inK:])
	}
}

// transposeBlock sets dst[r·ld+p] = blk[p·32+r] for r < 32, p < np.
func transposeBlock(dst []uint32, ld int, blk []uint32, np int) {
	for r := 0; r < amxMR; r++ {
		out := dst[r*ld : r*ld+np]
		for p := range out {
			out[p] = blk[p*amxMR+r]
		}
	}
}
