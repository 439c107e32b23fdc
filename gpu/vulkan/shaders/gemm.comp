#version 450
#ifdef Q4
#extension GL_GOOGLE_include_directive : require
#endif
// Tiled GEMM: C = alpha·op(A)·op(B) + beta·C, row-major with strides.
// op(A) is M×K: A[m*lda + k], or A[k*lda + m] when transA.
// op(B) is K×N: B[k*ldb + n], or B[n*ldb + k] when transB.
// C is M×N: C[m*ldc + n]; with beta == 0 C is not read (NaN there is
// overwritten, as in BLAS).
// Compiled twice: as is (B is fp32), and with -DB16, where B holds 16-bit
// values (bf16, or fp16 when b16fp16 != 0), two to a 32-bit word, element
// e in the low half of word e/2 when e is even; each is widened to fp32
// exactly in the shader, so the product is the fp32 product of the
// widened values.
// Compiled a third time with -DQ4, where B is a frozen 4-bit weight (NF4
// or FP4 in bitsandbytes' layout) read in place from its blob
// (quant.Tensor.Encode, uploaded as it is): each element of B is
// dequantized as the B tile is loaded, code × its block's absmax, the
// absmax itself resolved from its 8-bit nested code when double quantized
// (nested code × nested absmax, then + offset, each rounded to fp32 as
// bitsandbytes and quant.Tensor.BlockAbsmax compute it: precise, never
// fused), then rounded to the compute format (qRound) as nn's weights4
// rounds it. No dequantized copy of B exists anywhere; the values are the
// CPU's bit for bit, and the product is the fp32 product of them. Element
// e of B is the row-major element e of the weight (bOff is 0).
//
// Compiled with -DSPLITK (and -DSPLITK -DB16) for split-K: workgroup z
// of the grid walks only K's chunk [z·kChunk, min(K, (z+1)·kChunk)) and
// writes its raw fp32 sums (no α, β) to the scratch bound as C, packed:
// element (m, n) of chunk z at (z·M + m)·N + n. gemm_splitk_reduce.comp
// then adds the chunks in order 0, 1, … and applies α, β to C, so a
// product with few tiles of C and a long K fills the GPU with
// chunks × tiles workgroups (kernels.go's splitK).
//
// A 64×64 tile of C per workgroup of 16×16 invocations, each computing a
// 4×4 block; K is walked 16 at a time through shared memory tiles of
// 16×64 floats for A and B (8.5 KiB in all: fits lavapipe's 32 KiB and
// NVIDIA's 48 KiB). Accumulation is in fp32, in k order.

layout(local_size_x = 16, local_size_y = 16, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufA { float a[]; };
#if defined(B16) || defined(Q4)
layout(std430, set = 0, binding = 1) readonly buffer BufB { uint b[]; };
#else
layout(std430, set = 0, binding = 1) readonly buffer BufB { float b[]; };
#endif
layout(std430, set = 0, binding = 2) buffer BufC { float c[]; };

layout(push_constant) uniform Params {
	uint M, N, K;
	uint lda, ldb, ldc;
	uint aOff, bOff, cOff; // element offsets into the buffers
	uint transA, transB;
	float alpha, beta;
	uint b16fp16; // B16 only: 1 if B is fp16, 0 if bf16
#ifdef SPLITK
	uint kChunk; // the K values each workgroup z walks
#endif
#ifdef Q4
	// where the blob's parts lie: word offsets of the float parts, byte
	// offsets of the byte parts (quant.BlobLayout)
	uint qCode;         // word: the 16 code values
	uint qAbsmax;       // word: a float absmax per block, or, nested, byte: its code
	uint qNestedCode;   // word: the 256 nested code values (nested only)
	uint qNestedAbsmax; // word: a float per nested block (nested only)
	uint qPacked;       // byte: the packed codes, element e's in the high nibble of byte e/2 when e is even
	uint qBlock, qNestedBlock, qNested;
	float qOffset;      // added to a nested absmax (nested only)
	uint qRound;        // the compute format the values are rounded to: 0 none, 1 bf16, 2 fp16
#endif
} p;

#ifdef Q4
#include "half.glsl"

uint byteAt(uint o) { return (b[o >> 2] >> ((o & 3u) * 8u)) & 0xffu; }

// dequant4 is element e of the 4-bit weight, as quant.Tensor.DequantizeRange
// computes it, rounded to the compute format.
float dequant4(uint e) {
	uint blk = e / p.qBlock;
	precise float m;
	if (p.qNested != 0u) {
		uint c = byteAt(p.qAbsmax + blk);
		precise float s = uintBitsToFloat(b[p.qNestedCode + c]) * uintBitsToFloat(b[p.qNestedAbsmax + blk / p.qNestedBlock]);
		m = s + p.qOffset;
	} else {
		m = uintBitsToFloat(b[p.qAbsmax + blk]);
	}
	uint packed = byteAt(p.qPacked + (e >> 1));
	uint nib = (e & 1u) == 0u ? packed >> 4 : packed & 15u;
	precise float v = uintBitsToFloat(b[p.qCode + nib]) * m;
	return rnd(v, p.qRound);
}
#endif

#ifdef SPLITK
uint kEnd; // this workgroup's chunk of K ends here (set in main)
#define KEND kEnd
#else
#define KEND p.K
#endif

const uint TM = 64, TN = 64, TK = 16;
shared float As[TK][TM + 1];
shared float Bs[TK][TN + 1];

float loadA(uint m, uint k) {
	if (m >= p.M || k >= KEND) return 0.0;
	return p.transA != 0 ? a[p.aOff + k * p.lda + m] : a[p.aOff + m * p.lda + k];
}

float loadB(uint k, uint n) {
	if (k >= KEND || n >= p.N) return 0.0;
	uint e = p.bOff + (p.transB != 0 ? n * p.ldb + k : k * p.ldb + n);
#ifdef Q4
	return dequant4(e);
#elif defined(B16)
	uint h = (b[e >> 1] >> ((e & 1u) * 16u)) & 0xffffu;
	if (p.b16fp16 == 0) return uintBitsToFloat(h << 16);
	// fp16 → fp32 in integer code (exact; no driver's denormal mode applies).
	uint s = (h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (ex == 0u) {
		float v = float(m) * 5.9604644775390625e-8; // m·2^-24, exact
		return s != 0u ? -v : v;
	}
	if (ex == 31u) return uintBitsToFloat(s | 0x7f800000u | (m << 13));
	return uintBitsToFloat(s | ((ex + 112u) << 23) | (m << 13));
#else
	return b[e];
#endif
}

void main() {
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
	uint tid = ty * 16 + tx;
	uint m0 = gl_WorkGroupID.y * TM, n0 = gl_WorkGroupID.x * TN;
	float acc[4][4];
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++) acc[i][j] = 0.0;

#ifdef SPLITK
	uint kBeg = gl_WorkGroupID.z * p.kChunk;
	kEnd = min(p.K, kBeg + p.kChunk);
#else
	const uint kBeg = 0;
#endif
	for (uint k0 = kBeg; k0 < KEND; k0 += TK) {
		// 256 invocations load 16×64 = 1024 values of each tile, 4 each.
		for (uint r = 0; r < 4; r++) {
			uint idx = tid + r * 256;
			// A tile: As[kk][mm]. Consecutive invocations walk the
			// direction that is contiguous in memory.
			uint kk, mm;
			if (p.transA != 0) { kk = idx / TM; mm = idx % TM; } else { mm = idx / TK; kk = idx % TK; }
			As[kk][mm] = loadA(m0 + mm, k0 + kk);
			uint kb, nn;
			if (p.transB != 0) { nn = idx / TK; kb = idx % TK; } else { kb = idx / TN; nn = idx % TN; }
			Bs[kb][nn] = loadB(k0 + kb, n0 + nn);
		}
		barrier();
		for (uint kk = 0; kk < TK; kk++) {
			float av[4], bv[4];
			for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];
			for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
		}
		barrier();
	}

	for (int i = 0; i < 4; i++) {
		uint m = m0 + ty + 16 * i;
		if (m >= p.M) continue;
		for (int j = 0; j < 4; j++) {
			uint n = n0 + tx + 16 * j;
			if (n >= p.N) continue;
#ifdef SPLITK
			c[(gl_WorkGroupID.z * p.M + m) * p.N + n] = acc[i][j];
#else
			uint ci = p.cOff + m * p.ldc + n;
			float v = p.alpha * acc[i][j];
			if (p.beta != 0.0) v = fma(p.beta, c[ci], v);
			c[ci] = v;
#endif
		}
	}
}
