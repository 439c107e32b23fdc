#version 450
// Tensor-core GEMM: C = alpha·op(A)·op(B) + beta·C with 16-bit operands
// and fp32 accumulation, through cooperative matrices. Same arguments,
// push constants and buffer layout as gemm.comp (see there), for the
// products whose operands the precision policy has already rounded to
// the 16-bit format: each fp32 operand is narrowed to 16 bits in integer
// code (round to nearest even, subnormals kept: exact for the values the
// policy puts there; no driver's conversion or denormal mode applies), so
// the tensor cores multiply exactly those values
// and only the fp32 summation order differs from the scalar kernel.
//
// Compiled two ways (shaders/build.txt):
//  - FP16 with GL_NV_cooperative_matrix (Debian's glslc has it; it has
//    no GL_KHR_cooperative_matrix): fp16 A and B; B16 bits are fp16.
//  - BF16 with GL_KHR_cooperative_matrix and GL_EXT_bfloat16 (a newer
//    glslang: scripts/gen_spirv_coopmat.sh): bf16 A and B; B16 bits are
//    bf16.
// Both need subgroups of 32 and 16×16×16 fragments (the Go side checks
// the device lists that shape before picking the kernel). Each is built
// with fp32 B, with 16-bit B (B16), and with both operands 16-bit
// (A16 B16: Gemm narrows fp32 operands once before the product, with
// KernelOptions.Narrow16, so a K step's loads only copy).
//
// The tile is a compile-time configuration (-D, shaders/build.txt; the
// Go side's GemmVariants names each build): SG_M × SG_N subgroups of 32
// invocations, each owning FR_M × FR_N 16×16 fp32 accumulator fragments
// of C, so a workgroup computes a BM × BN = 16·SG_M·FR_M × 16·SG_N·FR_N
// tile; K is walked BK at a time (16 or 32). The default is 2×4 subgroups
// of 4×2 fragments, BK 32: 128×128 by 256 invocations.
//
// K loop: two shared stages of 16-bit values, two to a uint; the next K
// step's tiles are loaded from global memory into registers while this
// one is multiplied, then stored to the other stage, so one barrier per
// step. Global loads are 16 bytes (fp32 A or B: vec4) or 8 bytes (16-bit
// B: uvec2) along the direction each operand is contiguous in, through a
// second declaration of the same binding; a tile wholly inside the
// matrices with offsets and leading dimensions that are multiples of 4
// elements takes them without bounds checks, any other tile (ragged
// edges, misaligned layouts) loads the same elements one at a time,
// bounds-checked. Either way every element is narrowed by narrow().
//
// C: with beta 0, a tile wholly inside C with cOff and ldc multiples of 4
// (16-byte rows) is stored straight from the fragments, alpha·acc (matrix
// + matrix crashes Debian's glslc -O, so beta ≠ 0 takes the scratch);
// any other tile leaves through a per-subgroup
// 16×16 fp32 scratch (the shared stages, free by then), edges, alpha and
// beta in scalar code, in bounds.

#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable

#ifndef SG_M
#define SG_M 2
#define SG_N 4
#define FR_M 4
#define FR_N 2
#define BK 32
#endif
#define NT (32 * SG_M * SG_N) // invocations

#ifdef EMULATE
// Test build (TestGemmCoopmatEmulated): the fragments in plain code with
// the cooperative-matrix calls' arguments and semantics (row-major, offset
// and stride in elements of the array, two 16-bit values to a uint of the
// shared arrays, the first in the low half), so lavapipe runs everything
// else of this kernel: the tiles' loads, pairs, strides, edges, K loop and
// both ways out. Lane l of a subgroup holds row l/2, columns 8·(l%2)…+7
// of a C fragment. A fragment "load" keeps its offset and stride; the
// multiply reads the shared tiles then (they stay put until the barrier
// after it).
#define MatA uvec2
#define MatB uvec2
#define MatC float[8]
#define LOAD_A(m, buf, off, stride) m = uvec2(off, stride)
#define LOAD_B(m, buf, off, stride) m = uvec2(off, stride)
#define STORE_S(m, buf, off, stride) emuStoreS(m, off, stride)
#define STORE_C(m, buf, off, stride) emuStoreC(m, off, stride)
#define MULADD(a, b, c) emuMulAdd(a, b, c)
#define SCALE(m, s) emuScale(m, s)
#define ZERO(m) for (int e_ = 0; e_ < 8; e_++) m[e_] = 0.0
#define subgroupMemoryBarrierShared() memoryBarrierShared()
#define subgroupBarrier() barrier()
// Loops kept rolled: lavapipe compiles the unrolled emulation for minutes.
#define UNROLL [[dont_unroll]]
#else
// Loops over fragments and registers unrolled: arrays of them indexed by
// a loop variable would otherwise spill to memory.
#define UNROLL [[unroll]]
#define SCALE(m, s) ((s) * (m))
#endif
#ifdef EMULATE
#elif defined(BF16)
#extension GL_KHR_cooperative_matrix : enable
#extension GL_EXT_bfloat16 : enable
#define MatA coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MatB coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MatC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define LOAD_A(m, buf, off, stride) coopMatLoad(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define LOAD_B(m, buf, off, stride) coopMatLoad(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define ZERO(m) m = MatC(0.0)
#define STORE_S(m, buf, off, stride) coopMatStore(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define STORE_C(m, buf, off, stride) coopMatStore(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define MULADD(a, b, c) coopMatMulAdd(a, b, c)
#else
#extension GL_NV_cooperative_matrix : enable
#define MatA fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatB fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define LOAD_A(m, buf, off, stride) coopMatLoadNV(m, buf, off, stride, false)
#define LOAD_B(m, buf, off, stride) coopMatLoadNV(m, buf, off, stride, false)
#define ZERO(m) m = MatC(0.0)
#define STORE_S(m, buf, off, stride) coopMatStoreNV(m, buf, off, stride, false)
#define STORE_C(m, buf, off, stride) coopMatStoreNV(m, buf, off, stride, false)
#define MULADD(a, b, c) coopMatMulAddNV(a, b, c)
#endif

#include "half.glsl"

layout(local_size_x = NT, local_size_y = 1, local_size_z = 1) in;

// Each buffer twice: by element, and by 16 (A, fp32 B) or 8 (16-bit B)
// bytes for the aligned tiles' loads.
#ifdef A16
// A16 (with B16): A too holds 16-bit values of the kernel's format, two
// to a word, which Gemm narrowed from fp32 once (round16.comp) before
// this product, so a K step's loads are copies, not one narrowing per
// element per tile of C.
layout(std430, set = 0, binding = 0) readonly buffer BufA { uint a[]; };
layout(std430, set = 0, binding = 0) readonly buffer BufA4 { uvec2 a4[]; }; // 4 halves
#else
layout(std430, set = 0, binding = 0) readonly buffer BufA { float a[]; };
layout(std430, set = 0, binding = 0) readonly buffer BufA4 { vec4 a4[]; };
#endif
#ifdef B16
layout(std430, set = 0, binding = 1) readonly buffer BufB { uint b[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB4 { uvec2 b4[]; }; // 4 halves
#else
layout(std430, set = 0, binding = 1) readonly buffer BufB { float b[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB4 { vec4 b4[]; };
#endif
layout(std430, set = 0, binding = 2) buffer BufC { float c[]; };

layout(push_constant) uniform Params {
	uint M, N, K;
	uint lda, ldb, ldc;
	uint aOff, bOff, cOff;
	uint transA, transB;
	float alpha, beta;
	uint b16fp16; // unused: B16 bits are in the kernel's own format
} p;

const uint BM = 16 * SG_M * FR_M, BN = 16 * SG_N * FR_N;
// Shared rows padded by 8 halves (4 uints) against bank conflicts (the
// fragment loads' 8 rows of 16 bytes fall in distinct banks); the
// fragment loads need row strides that are a multiple of 16 bytes.
const uint SA = (BK + 8) / 2; // uints per A row (BM rows of BK halves)
const uint SB = (BN + 8) / 2; // uints per B row (BK rows of BN halves)
const uint STAGE_A = BM * SA, STAGE_B = BK * SB;
shared uint As[2 * STAGE_A]; // also the C scratch: 256 words a subgroup (SG_M·SG_N·256 ≤ 2·STAGE_A)
shared uint Bs[2 * STAGE_B];
// Each invocation's share of a K step's tiles, in uints (pairs).
const uint RA = BM * BK / (2 * NT), RB = BK * BN / (2 * NT);

#ifdef EMULATE
float emuWiden(uint h) {
#ifdef BF16
	return uintBitsToFloat(h << 16);
#else
	return fromFP16(h);
#endif
}

// emuHalf is 16-bit element (r, c) of the row-major fragment at uint
// offset off with stride uints per row, in As (a) or Bs.
float emuHalf(bool a, uint off, uint stride, uint r, uint c) {
	uint w = a ? As[off + r * stride + c / 2] : Bs[off + r * stride + c / 2];
	return emuWiden((w >> ((c & 1u) * 16u)) & 0xffffu);
}

// emuMulAdd is c + a·b for the lane's 8 elements of C.
float[8] emuMulAdd(uvec2 a, uvec2 b, float c[8]) {
	uint lane = gl_LocalInvocationID.x % 32;
	UNROLL for (uint e = 0; e < 8; e++)
		UNROLL for (uint k = 0; k < 16; k++)
			c[e] = fma(emuHalf(true, a.x, a.y, lane / 2, k), emuHalf(false, b.x, b.y, k, 8 * (lane % 2) + e), c[e]);
	return c;
}

// emuAt is the element index of the lane's e-th element of a row-major
// fragment at off with stride.
uint emuAt(uint off, uint stride, uint e) {
	uint lane = gl_LocalInvocationID.x % 32;
	return off + (lane / 2) * stride + 8 * (lane % 2) + e;
}

void emuStoreS(float m[8], uint off, uint stride) {
	UNROLL for (uint e = 0; e < 8; e++) As[emuAt(off, stride, e)] = floatBitsToUint(m[e]);
}

void emuStoreC(float m[8], uint off, uint stride) {
	UNROLL for (uint e = 0; e < 8; e++) c[emuAt(off, stride, e)] = m[e];
}

float[8] emuScale(float m[8], float s) {
	UNROLL for (uint e = 0; e < 8; e++) m[e] *= s;
	return m;
}
#endif

// narrow is the 16-bit bits of the fp32 value v in the kernel's format,
// rounded to nearest even. The values the policy put there take a short
// path (a few integer operations instead of toBF16's or toFP16's dozen):
// a bf16 value is its high half; a normal fp16 value is its sign, its
// exponent rebiased and the top 10 bits of its significand.
uint narrow(float v) {
	uint u = floatBitsToUint(v);
#ifdef BF16
	if ((u & 0xffffu) == 0u) return u >> 16;
	return toBF16(u);
#else
	uint e = (u >> 23) & 0xffu;
	if (e - 113u < 30u && (u & 0x1fffu) == 0u) // fp16 exponents 1…30, 10-bit significand
		return ((u >> 16) & 0x8000u) | (((u >> 13) & 0x3ffffu) - (112u << 10));
	return toFP16(u);
#endif
}

// quadA is A's stored elements (r, c…c+3) (A as it lies in memory: M×K,
// or K×M when transA), narrowed; zero outside it. fast: all four are
// inside and element (r, c) is 16-byte aligned.
uvec4 quadA(uint r, uint c, bool fast) {
	uint e = p.aOff + r * p.lda + c;
#ifdef A16
	if (fast) {
		uvec2 w = a4[e / 4];
		return uvec4(w.x & 0xffffu, w.x >> 16, w.y & 0xffffu, w.y >> 16);
	}
	uint rows16 = p.transA != 0 ? p.K : p.M, cols16 = p.transA != 0 ? p.M : p.K;
	uvec4 h;
	UNROLL for (uint j = 0; j < 4; j++) {
		h[j] = 0u;
		if (r < rows16 && c + j < cols16) h[j] = half16(a, e + j);
	}
	return h;
#else
	vec4 v;
	if (fast) {
		v = a4[e / 4];
	} else {
		uint rows = p.transA != 0 ? p.K : p.M, cols = p.transA != 0 ? p.M : p.K;
		UNROLL for (uint j = 0; j < 4; j++) { // branches, not selects: no load outside the matrix
			v[j] = 0.0;
			if (r < rows && c + j < cols) v[j] = a[e + j];
		}
	}
	return uvec4(narrow(v.x), narrow(v.y), narrow(v.z), narrow(v.w));
#endif
}

// quadB is quadA for B (K×N, or N×K when transB): 16-bit B's bits as
// they are.
uvec4 quadB(uint r, uint c, bool fast) {
	uint e = p.bOff + r * p.ldb + c;
	uint rows = p.transB != 0 ? p.N : p.K, cols = p.transB != 0 ? p.K : p.N;
#ifdef B16
	if (fast) {
		uvec2 w = b4[e / 4];
		return uvec4(w.x & 0xffffu, w.x >> 16, w.y & 0xffffu, w.y >> 16);
	}
	uvec4 h;
	UNROLL for (uint j = 0; j < 4; j++) {
		h[j] = 0u;
		if (r < rows && c + j < cols) h[j] = half16(b, e + j);
	}
	return h;
#else
	vec4 v;
	if (fast) {
		v = b4[e / 4];
	} else {
		UNROLL for (uint j = 0; j < 4; j++) {
			v[j] = 0.0;
			if (r < rows && c + j < cols) v[j] = b[e + j];
		}
	}
	return uvec4(narrow(v.x), narrow(v.y), narrow(v.z), narrow(v.w));
#endif
}

// The shared tiles: A's rows are op(A)'s m (BK halves of k, two to a
// uint), B's are op(B)'s k (BN halves of n). A K step's tiles are moved
// in units of 4 elements contiguous in memory, consecutive invocations
// taking consecutive units along the contiguous direction:
//  - untransposed A (k contiguous) and B (n contiguous): one quad, two
//    uints of one shared row;
//  - transposed A (m contiguous) or B (k contiguous): a quad from each of
//    two adjacent rows of memory, paired element by element into four
//    uints, one in each of four shared rows.
// unitA is the m and k of A's unit u (tid + NT·i) relative to the tile.
uvec2 unitA(uint u) {
	if (p.transA == 0) return uvec2(u / (BK / 4), 4 * (u % (BK / 4)));
	return uvec2(4 * (u % (BM / 4)), 2 * (u / (BM / 4)));
}

// unitB is the k and n of B's unit u.
uvec2 unitB(uint u) {
	if (p.transB == 0) return uvec2(u / (BN / 4), 4 * (u % (BN / 4)));
	return uvec2(4 * (u % (BK / 4)), 2 * (u / (BK / 4)));
}

// fetch loads the K step at k0 into registers (ra, rb: this invocation's
// units' uints in order).
void fetch(uint m0, uint n0, uint k0, uint tid, bool vecA, bool vecB, inout uint ra[RA], inout uint rb[RB]) {
	bool inK = k0 + BK <= p.K;
	bool fastA = vecA && inK && m0 + BM <= p.M, fastB = vecB && inK && n0 + BN <= p.N;
	if (p.transA == 0) {
		UNROLL for (uint i = 0; i < RA / 2; i++) {
			uvec2 mk = unitA(tid + NT * i);
			uvec4 q = quadA(m0 + mk.x, k0 + mk.y, fastA);
			ra[2 * i] = q.x | (q.y << 16);
			ra[2 * i + 1] = q.z | (q.w << 16);
		}
	} else {
		UNROLL for (uint i = 0; i < RA / 4; i++) {
			uvec2 mk = unitA(tid + NT * i);
			uvec4 q0 = quadA(k0 + mk.y, m0 + mk.x, fastA), q1 = quadA(k0 + mk.y + 1, m0 + mk.x, fastA);
			UNROLL for (uint j = 0; j < 4; j++) ra[4 * i + j] = q0[j] | (q1[j] << 16);
		}
	}
	if (p.transB == 0) {
		UNROLL for (uint i = 0; i < RB / 2; i++) {
			uvec2 kn = unitB(tid + NT * i);
			uvec4 q = quadB(k0 + kn.x, n0 + kn.y, fastB);
			rb[2 * i] = q.x | (q.y << 16);
			rb[2 * i + 1] = q.z | (q.w << 16);
		}
	} else {
		UNROLL for (uint i = 0; i < RB / 4; i++) {
			uvec2 kn = unitB(tid + NT * i);
			uvec4 q0 = quadB(n0 + kn.y, k0 + kn.x, fastB), q1 = quadB(n0 + kn.y + 1, k0 + kn.x, fastB);
			UNROLL for (uint j = 0; j < 4; j++) rb[4 * i + j] = q0[j] | (q1[j] << 16);
		}
	}
}

// stash stores the registers fetch filled into shared stage st.
void stash(uint st, uint tid, uint ra[RA], uint rb[RB]) {
	uint sa = st * STAGE_A, sb = st * STAGE_B;
	if (p.transA == 0) {
		UNROLL for (uint i = 0; i < RA / 2; i++) {
			uvec2 mk = unitA(tid + NT * i);
			As[sa + mk.x * SA + mk.y / 2] = ra[2 * i];
			As[sa + mk.x * SA + mk.y / 2 + 1] = ra[2 * i + 1];
		}
	} else {
		UNROLL for (uint i = 0; i < RA / 4; i++) {
			uvec2 mk = unitA(tid + NT * i);
			UNROLL for (uint j = 0; j < 4; j++) As[sa + (mk.x + j) * SA + mk.y / 2] = ra[4 * i + j];
		}
	}
	if (p.transB == 0) {
		UNROLL for (uint i = 0; i < RB / 2; i++) {
			uvec2 kn = unitB(tid + NT * i);
			Bs[sb + kn.x * SB + kn.y / 2] = rb[2 * i];
			Bs[sb + kn.x * SB + kn.y / 2 + 1] = rb[2 * i + 1];
		}
	} else {
		UNROLL for (uint i = 0; i < RB / 4; i++) {
			uvec2 kn = unitB(tid + NT * i);
			UNROLL for (uint j = 0; j < 4; j++) Bs[sb + (kn.x + j) * SB + kn.y / 2] = rb[4 * i + j];
		}
	}
}

void main() {
	uint tid = gl_LocalInvocationID.x;
#ifdef EMULATE
	uint sg = tid / 32, lane = tid % 32;
#else
	uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID; // subgroups of 32 (checked on the Go side)
#endif
	uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
	uint wm = (sg / SG_N) * (16 * FR_M), wn = (sg % SG_N) * (16 * FR_N); // this subgroup's part of the tile
	// 16-byte loads need every unit's first element at a multiple of 4.
	bool vecA = p.aOff % 4 == 0 && p.lda % 4 == 0, vecB = p.bOff % 4 == 0 && p.ldb % 4 == 0;

	MatC acc[FR_M][FR_N];
	UNROLL for (int i = 0; i < FR_M; i++)
		UNROLL for (int j = 0; j < FR_N; j++) ZERO(acc[i][j]);

	uint ra[RA], rb[RB];
	fetch(m0, n0, 0, tid, vecA, vecB, ra, rb);
	stash(0, tid, ra, rb);
	barrier();
	uint st = 0;
	for (uint k0 = 0; k0 < p.K; k0 += BK) {
		bool more = k0 + BK < p.K;
		// The next K step's tiles, into registers, while this one multiplies.
		if (more) fetch(m0, n0, k0 + BK, tid, vecA, vecB, ra, rb);
		uint sa = st * STAGE_A, sb = st * STAGE_B;
		UNROLL for (uint kk = 0; kk < BK; kk += 16) {
			MatA fa[FR_M];
			MatB fb[FR_N];
			UNROLL for (int i = 0; i < FR_M; i++) LOAD_A(fa[i], As, sa + (wm + 16 * i) * SA + kk / 2, SA);
			UNROLL for (int j = 0; j < FR_N; j++) LOAD_B(fb[j], Bs, sb + kk * SB + (wn + 16 * j) / 2, SB);
			UNROLL for (int i = 0; i < FR_M; i++)
				UNROLL for (int j = 0; j < FR_N; j++) acc[i][j] = MULADD(fa[i], fb[j], acc[i][j]);
		}
		// The other stage was last read before the previous barrier.
		if (more) stash(st ^ 1u, tid, ra, rb);
		barrier();
		st ^= 1u;
	}

	if (p.beta == 0.0 && m0 + BM <= p.M && n0 + BN <= p.N && p.cOff % 4 == 0 && p.ldc % 4 == 0) {
		// Straight to C: all inside, 16-byte aligned rows, C not read.
		UNROLL for (int i = 0; i < FR_M; i++)
			UNROLL for (int j = 0; j < FR_N; j++)
				STORE_C(SCALE(acc[i][j], p.alpha), c, p.cOff + (m0 + wm + 16 * i) * p.ldc + n0 + wn + 16 * j, p.ldc);
		return;
	}
	// Out through this subgroup's scratch, 16×16 at a time; lane l writes
	// 8 values of each fragment (rows l/2, columns 8·(l%2)...+7). The
	// loop's last barrier has every subgroup done with the stages.
	uint base = sg * 256;
	UNROLL for (int i = 0; i < FR_M; i++) {
		UNROLL for (int j = 0; j < FR_N; j++) {
			STORE_S(acc[i][j], As, base, 16);
			subgroupMemoryBarrierShared();
			subgroupBarrier();
			uint rr = lane / 2, cc0 = 8 * (lane % 2);
			uint m = m0 + wm + 16 * i + rr;
			if (m < p.M) {
				for (uint cc = cc0; cc < cc0 + 8; cc++) {
					uint n = n0 + wn + 16 * j + cc;
					if (n >= p.N) break;
					uint ci = p.cOff + m * p.ldc + n;
					float v = p.alpha * uintBitsToFloat(As[base + rr * 16 + cc]);
					if (p.beta != 0.0) v = fma(p.beta, c[ci], v);
					c[ci] = v;
				}
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
		}
	}
}
