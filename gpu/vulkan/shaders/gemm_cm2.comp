#version 450
// Tensor-core GEMM through workgroup-scope cooperative matrices
// (GL_NV_cooperative_matrix2, llama.cpp's coopmat2 pattern): C =
// alpha·op(A)·op(B) + beta·C with both operands 16-bit values of the
// kernel's format in memory and fp32 accumulation. The driver stages the
// tiles through shared memory and schedules the fragments; the kernel
// only names a workgroup's BM × BK slice of op(A), BK × BN slice of op(B)
// and BM × BN accumulator, through tensor layouts.
//
// Same bindings and push constants as gemm_coopmat.comp's A16 build:
// A and B hold 16-bit values two to a word (Gemm narrows fp32 operands
// into scratch first: narrowOperands), offsets and leading dimensions in
// 16-bit elements. A layout's element offset must be a multiple of 16
// bytes (8 values), which Gemm guarantees (the narrowed copies start on
// one; a 16-bit B whose offset is not goes to the fp32 kernel).
//
// Which fragments the hardware runs and in which order it sums K is the
// driver's, fixed for a build on a device: the same bits run to run. The
// self-check holds it to γ_{k+2}·(|α|Σ|a||b| + |βc|) with u = 2^-23, as
// every tensor-core kernel.
//
// C leaves two ways:
//  - a tile wholly inside C, beta 0, cOff a multiple of 4: stored as a
//    tensor (alpha·acc);
//  - any other: element by element (coopMatPerElementNV), in bounds,
//    fma(beta, c, alpha·acc) as the scalar kernel; C's old values are
//    read in one pass, then a barrier, then written in another, because
//    an element operation may run more than once per element.
//
// Compiled by a glslang newer than Debian's (build_glslang.txt), for
// SPIR-V 1.6 (Vulkan 1.3): FP16 or BF16 operands; BM, BN, BK, NT, and
// UNROLL, the K steps a trip of the K loop (1 unless named).

#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_cooperative_matrix : enable
#extension GL_NV_cooperative_matrix2 : enable
#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_EXT_shader_explicit_arithmetic_types_int32 : enable
#ifdef BF16
#extension GL_EXT_bfloat16 : enable
#define HALF bfloat16_t
#else
#define HALF float16_t
#endif

#ifndef BM
#define BM 128
#define BN 256
#define BK 32
#define NT 256
#endif

layout(local_size_x = NT, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufA { uint a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { uint b[]; };
layout(std430, set = 0, binding = 2) buffer BufC { float c[]; };

layout(push_constant) uniform Params {
	uint M, N, K;
	uint lda, ldb, ldc;
	uint aOff, bOff, cOff;
	uint transA, transB;
	float alpha, beta;
	uint b16fp16; // unused: both operands are in the kernel's own format
} p;

#define MatA coopmat<HALF, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MatB coopmat<HALF, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define MatC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>

// readC is C's element (m0 + r, n0 + col), 0 outside C.
float readC(const in uint32_t r, const in uint32_t col, const in float e, const in uint32_t m0, const in uint32_t n0) {
	uint m = m0 + r, n = n0 + col;
	if (m >= p.M || n >= p.N) return 0.0;
	return c[p.cOff + m * p.ldc + n];
}

// combine is alpha·acc + beta·old, the scalar kernel's fma.
float combine(const in uint32_t r, const in uint32_t col, const in float acc, const in float old) {
	return fma(p.beta, old, p.alpha * acc);
}

// scaleAcc is alpha·acc.
float scaleAcc(const in uint32_t r, const in uint32_t col, const in float acc) { return p.alpha * acc; }

// writeC stores v at C's element (m0 + r, n0 + col) when inside C; it
// writes the same value however often it runs.
float writeC(const in uint32_t r, const in uint32_t col, const in float v, const in uint32_t m0, const in uint32_t n0) {
	uint m = m0 + r, n = n0 + col;
	if (m < p.M && n < p.N) c[p.cOff + m * p.ldc + n] = v;
	return v;
}

// The K loop, one copy for each pair of operand loads (LOAD_AN … LOAD_BT
// below, so no branch on the transposes inside it): UNROLL steps of BK a
// trip while they fit, then one step a trip (the rest, and a ragged
// last step on clamped layouts). Unrolled, the driver sees the next
// steps' loads beside this step's products and can issue them ahead
// (llama.cpp's mul_mm_cm2.comp unrolls eight steps for that reason). The
// steps are written out here, not left to an unroll hint: glslang without
// its optimizer only passes the hint on.
#ifndef UNROLL
#define UNROLL 1
#endif
#define K_STEP(LOADA, LOADB)              \
	{                                     \
		MatA fa;                          \
		MatB fb;                          \
		LOADA;                            \
		LOADB;                            \
		acc = coopMatMulAdd(fa, fb, acc); \
		k0 += BK;                         \
	}
#define K_STEP2(LOADA, LOADB) K_STEP(LOADA, LOADB) K_STEP(LOADA, LOADB)
#define K_STEP4(LOADA, LOADB) K_STEP2(LOADA, LOADB) K_STEP2(LOADA, LOADB)
#define K_STEP8(LOADA, LOADB) K_STEP4(LOADA, LOADB) K_STEP4(LOADA, LOADB)
#if UNROLL == 8
#define K_TRIP K_STEP8
#elif UNROLL == 4
#define K_TRIP K_STEP4
#elif UNROLL == 2
#define K_TRIP K_STEP2
#elif UNROLL == 1
#define K_TRIP K_STEP
#else
#error UNROLL must be 1, 2, 4 or 8
#endif
#define K_LOOP(LOADA, LOADB)                          \
	{                                                 \
		uint k0 = 0u;                                 \
		while (k0 + UNROLL * BK <= p.K)               \
			K_TRIP(LOADA, LOADB)                      \
		while (k0 < p.K)                              \
			K_STEP(LOADA, LOADB)                      \
	}
// op(A)'s stored slice is (m, k), or (k, m) read through a transposing
// view; op(B)'s (k, n), or (n, k) transposed.
#define LOAD_AN(LA) coopMatLoadTensorNV(fa, a, aBase, sliceTensorLayoutNV(LA, m0, BM, k0, BK))
#define LOAD_AT(LA) coopMatLoadTensorNV(fa, a, aBase, sliceTensorLayoutNV(LA, k0, BK, m0, BM), transposed)
#define LOAD_BN(LB) coopMatLoadTensorNV(fb, b, bBase, sliceTensorLayoutNV(LB, k0, BK, n0, BN))
#define LOAD_BT(LB) coopMatLoadTensorNV(fb, b, bBase, sliceTensorLayoutNV(LB, n0, BN, k0, BK), transposed)
#define K_LOOPS(LA, LB)                                   \
	if (p.transA == 0u && p.transB == 0u)                 \
		K_LOOP(LOAD_AN(LA), LOAD_BN(LB))                  \
	else if (p.transA == 0u)                              \
		K_LOOP(LOAD_AN(LA), LOAD_BT(LB))                  \
	else if (p.transB == 0u)                              \
		K_LOOP(LOAD_AT(LA), LOAD_BN(LB))                  \
	else                                                  \
		K_LOOP(LOAD_AT(LA), LOAD_BT(LB))

void main() {
	uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
	// Element offsets in uints (two values each); Gemm makes aOff and bOff
	// multiples of 8 values, 16 bytes.
	uint aBase = p.aOff / 2u, bBase = p.bOff / 2u;
	uint ar = p.transA != 0 ? p.K : p.M, ac = p.transA != 0 ? p.M : p.K;
	uint br = p.transB != 0 ? p.N : p.K, bc = p.transB != 0 ? p.K : p.N;

	tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
	MatC acc = MatC(0.0);
	if (m0 + BM <= p.M && n0 + BN <= p.N && p.K % BK == 0 && (p.aOff | p.bOff | p.lda | p.ldb) % 8u == 0u) {
		// Every slice inside its operand: no clamping. Every row starts
		// on 16 bytes (offsets and strides tested above), and the
		// masks say so to the driver, which may then load 16 bytes at a
		// time without checking (llama.cpp's "stride &= ~7").
		aBase &= ~3u;
		bBase &= ~3u;
		tensorLayoutNV<2> la = createTensorLayoutNV(2);
		tensorLayoutNV<2> lb = createTensorLayoutNV(2);
		la = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(la, ar, ac), p.lda & ~7u, 1);
		lb = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lb, br, bc), p.ldb & ~7u, 1);
		K_LOOPS(la, lb)
	} else {
		// Ragged tiles: what lies outside an operand loads as zero.
		tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> la = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
		tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lb = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
		la = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(la, ar, ac), p.lda, 1);
		lb = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lb, br, bc), p.ldb, 1);
		K_LOOPS(la, lb)
	}

	if (p.beta == 0.0 && m0 + BM <= p.M && n0 + BN <= p.N && p.cOff % 4 == 0) {
		tensorLayoutNV<2> lc = createTensorLayoutNV(2);
		lc = setTensorLayoutStrideNV(setTensorLayoutDimensionNV(lc, p.M, p.N), p.ldc, 1);
		MatC out_;
		coopMatPerElementNV(out_, acc, scaleAcc);
		coopMatStoreTensorNV(out_, c, p.cOff, sliceTensorLayoutNV(lc, m0, BM, n0, BN));
		return;
	}
	MatC out_;
	if (p.beta != 0.0) {
		MatC old;
		coopMatPerElementNV(old, acc, readC, m0, n0);
		barrier(); // every old value read before any is written
		coopMatPerElementNV(out_, acc, combine, old);
	} else {
		coopMatPerElementNV(out_, acc, scaleAcc);
	}
	MatC done;
	coopMatPerElementNV(done, out_, writeC, m0, n0);
}
