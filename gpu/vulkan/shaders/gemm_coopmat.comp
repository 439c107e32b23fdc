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
// the device lists that shape before picking the kernel).
//
// A 128×128 tile of C per workgroup of 256 invocations (8 subgroups as
// 2×4, each owning 64×32 of C: 4×2 accumulator fragments); K walked 32 at
// a time through shared tiles of 16-bit values, two to a uint, loaded from
// global memory into registers while the previous tile is multiplied.
// C leaves through a per-subgroup 16×16 fp32 scratch, so edges, alpha and
// beta are handled in scalar code, in bounds.

#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_GOOGLE_include_directive : enable
#ifdef EMULATE
// Test build (TestGemmCoopmatEmulated): the fragments in plain code with
// the cooperative-matrix calls' arguments and semantics (row-major, offset
// and stride in uints of the shared arrays, two 16-bit values to a uint,
// the first in the low half), so lavapipe runs everything else of this
// kernel: the tiles' loads, pairs, strides, edges, K loop and the way out.
// Lane l of a subgroup holds row l/2, columns 8·(l%2)…+7 of a C fragment.
// A fragment "load" keeps its offset and stride; the multiply reads the
// shared tiles then (they stay put until the barrier after it).
#define MatA uvec2
#define MatB uvec2
#define MatC float[8]
#define LOAD_A(m, buf, off, stride) m = uvec2(off, stride)
#define LOAD_B(m, buf, off, stride) m = uvec2(off, stride)
#define STORE(m, buf, off, stride) emuStore(m, off, stride)
#define MULADD(a, b, c) emuMulAdd(a, b, c)
#define ZERO(m) for (int e_ = 0; e_ < 8; e_++) m[e_] = 0.0
#define subgroupMemoryBarrierShared() memoryBarrierShared()
#define subgroupBarrier() barrier()
// Loops kept rolled: lavapipe compiles the unrolled emulation for minutes.
#extension GL_EXT_control_flow_attributes : enable
#define ROLLED [[dont_unroll]]
#else
#define ROLLED
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
#define STORE(m, buf, off, stride) coopMatStore(m, buf, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define MULADD(a, b, c) coopMatMulAdd(a, b, c)
#else
#extension GL_NV_cooperative_matrix : enable
#define MatA fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatB fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define LOAD_A(m, buf, off, stride) coopMatLoadNV(m, buf, off, stride, false)
#define LOAD_B(m, buf, off, stride) coopMatLoadNV(m, buf, off, stride, false)
#define ZERO(m) m = MatC(0.0)
#define STORE(m, buf, off, stride) coopMatStoreNV(m, buf, off, stride, false)
#define MULADD(a, b, c) coopMatMulAddNV(a, b, c)
#endif

#include "half.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufA { float a[]; };
#ifdef B16
layout(std430, set = 0, binding = 1) readonly buffer BufB { uint b[]; };
#else
layout(std430, set = 0, binding = 1) readonly buffer BufB { float b[]; };
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

const uint BM = 128, BN = 128, BK = 32;
// Shared rows padded by 8 halves (4 uints) against bank conflicts; the
// fragment loads need row strides that are a multiple of 16 bytes.
const uint SA = (BK + 8) / 2; // uints per A row (BM rows of BK halves)
const uint SB = (BN + 8) / 2; // uints per B row (BK rows of BN halves)
shared uint As[BM * SA];
shared uint Bs[BK * SB];
shared float Cs[8 * 256]; // one 16×16 scratch per subgroup

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
	ROLLED for (uint e = 0; e < 8; e++)
		ROLLED for (uint k = 0; k < 16; k++)
			c[e] = fma(emuHalf(true, a.x, a.y, lane / 2, k), emuHalf(false, b.x, b.y, k, 8 * (lane % 2) + e), c[e]);
	return c;
}

void emuStore(float m[8], uint off, uint stride) {
	uint lane = gl_LocalInvocationID.x % 32;
	ROLLED for (uint e = 0; e < 8; e++) Cs[off + (lane / 2) * stride + 8 * (lane % 2) + e] = m[e];
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

uint loadA(uint m, uint k) {
	if (m >= p.M || k >= p.K) return 0u;
	return narrow(p.transA != 0 ? a[p.aOff + k * p.lda + m] : a[p.aOff + m * p.lda + k]);
}

uint loadB(uint k, uint n) {
	if (k >= p.K || n >= p.N) return 0u;
	uint e = p.bOff + (p.transB != 0 ? n * p.ldb + k : k * p.ldb + n);
#ifdef B16
	return half16(b, e);
#else
	return narrow(b[e]);
#endif
}

// Each invocation moves 8 pairs of A and 8 of B per K step: pair i of A
// is op(A)'s (m, k) and (m, k+1), a word of an A row in shared memory; of
// B, op(B)'s (k, n) and (k, n+1). Consecutive invocations walk the
// direction contiguous in memory, so a pair is two loads from one row of
// memory or one each from two rows.
void pairA(uint idx, out uint mm, out uint kk) {
	if (p.transA != 0) { kk = 2 * (idx / BM); mm = idx % BM; } // A[k][m]: m contiguous
	else { mm = idx / (BK / 2); kk = 2 * (idx % (BK / 2)); }   // A[m][k]: k contiguous
}

void pairB(uint idx, out uint kk, out uint nn) {
	if (p.transB != 0) { nn = 2 * (idx / BK); kk = idx % BK; } // B[n][k]: k contiguous
	else { kk = idx / (BN / 2); nn = 2 * (idx % (BN / 2)); }   // B[k][n]: n contiguous
}

// fetch loads the K step at k0 into registers: ra[r], rb[r] are pair
// tid + 256·r's two 16-bit values, the first in the low half.
void fetch(uint m0, uint n0, uint k0, uint tid, inout uint ra[8], inout uint rb[8]) {
	ROLLED for (uint r = 0; r < 8; r++) {
		uint idx = tid + r * 256, mm, kk, nn;
		pairA(idx, mm, kk);
		ra[r] = loadA(m0 + mm, k0 + kk) | (loadA(m0 + mm, k0 + kk + 1) << 16);
		pairB(idx, kk, nn);
		rb[r] = loadB(k0 + kk, n0 + nn) | (loadB(k0 + kk, n0 + nn + 1) << 16);
	}
}

void main() {
	uint tid = gl_LocalInvocationID.x;
#ifdef EMULATE
	uint sg = tid / 32, lane = tid % 32;
#else
	uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID; // 8 subgroups of 32 (checked on the Go side)
#endif
	uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN;
	uint wm = (sg / 4) * 64, wn = (sg % 4) * 32; // this subgroup's 64×32 of the tile

	MatC acc[4][2];
	ROLLED for (int i = 0; i < 4; i++)
		ROLLED for (int j = 0; j < 2; j++) ZERO(acc[i][j]);

	uint ra[8], rb[8];
	fetch(m0, n0, 0, tid, ra, rb);
	ROLLED for (uint k0 = 0; k0 < p.K; k0 += BK) {
		// Registers to shared: A's shared rows are m (BK halves of k),
		// B's are k (BN halves of n).
		ROLLED for (uint r = 0; r < 8; r++) {
			uint idx = tid + r * 256, mm, kk, nn;
			pairA(idx, mm, kk);
			As[mm * SA + kk / 2] = ra[r];
			pairB(idx, kk, nn);
			Bs[kk * SB + nn / 2] = rb[r];
		}
		barrier();
		// The next K step's tiles, into registers, while this one multiplies.
		if (k0 + BK < p.K) fetch(m0, n0, k0 + BK, tid, ra, rb);

		ROLLED for (uint kk = 0; kk < BK; kk += 16) {
			MatA fa[4];
			MatB fb[2];
			ROLLED for (int i = 0; i < 4; i++) LOAD_A(fa[i], As, (wm + 16 * i) * SA + kk / 2, SA);
			ROLLED for (int j = 0; j < 2; j++) LOAD_B(fb[j], Bs, kk * SB + (wn + 16 * j) / 2, SB);
			ROLLED for (int i = 0; i < 4; i++)
				ROLLED for (int j = 0; j < 2; j++) acc[i][j] = MULADD(fa[i], fb[j], acc[i][j]);
		}
		barrier();
	}

	// Out through this subgroup's scratch, 16×16 at a time; lane l writes
	// 8 values of each fragment (rows l/2, columns 8·(l%2)...+7).
	uint base = sg * 256;
	ROLLED for (int i = 0; i < 4; i++) {
		ROLLED for (int j = 0; j < 2; j++) {
			STORE(acc[i][j], Cs, base, 16);
			subgroupMemoryBarrierShared();
			subgroupBarrier();
			uint rr = lane / 2, cc0 = 8 * (lane % 2);
			uint m = m0 + wm + 16 * i + rr;
			if (m < p.M) {
				ROLLED for (uint cc = cc0; cc < cc0 + 8; cc++) {
					uint n = n0 + wn + 16 * j + cc;
					if (n >= p.N) break;
					uint ci = p.cOff + m * p.ldc + n;
					float v = p.alpha * Cs[base + rr * 16 + cc];
					if (p.beta != 0.0) v = fma(p.beta, c[ci], v);
					c[ci] = v;
				}
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
		}
	}
}
