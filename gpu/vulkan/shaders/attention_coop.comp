#version 450
// attention.comp with its products on tensor cores: the same tiles, masks,
// softmax, rounding points, saved stats, row sums, grouped heads and
// fixed orders, with each 64×64 tile's dot products (S = Q·Kᵀ, dP = dO·Vᵀ,
// and in DKV K·Qᵀ, V·dOᵀ) and each W·X (O += P·V, dQ += dS·K, dV += Pᵀ·dO,
// dK += dSᵀ·Q) on subgroup-scope 16×16×16 cooperative-matrix fragments
// with fp32 accumulation (llama.cpp's coopmat1 flash-attention pattern:
// operands staged in shared memory as 16-bit values, fragments loaded
// from there). For the policy's 16-bit products only: the Go side runs it
// when Q, K, V and dO hold values of the kernel's format and the scores
// and values are rounded to it (P and dS then are too), so every operand
// is narrowed exactly (integer code, gemm_coopmat.comp's narrow) and the
// products are exact: only the fp32 summation order of the products
// differs from attention.comp, and it is fixed (the fragments' order, K
// chunks in order, tiles in order), so results are the same run to run.
//
// Builds (shaders/build.txt, build_glslang.txt): -DFORWARD, -DDQ or -DDKV,
// -DMAXD=64 or 128 (head dimensions up to it; columns past D are zero),
// and the format: fp16 through GL_NV_cooperative_matrix (Debian's glslc),
// -DBF16 through GL_KHR_cooperative_matrix and GL_EXT_bfloat16 (a newer
// glslang), or -DEMULATE (with or without -DBF16): the fragments in plain
// code, fp32 fmas in k order, so lavapipe, which has no cooperative
// matrices, runs everything else of this source.
//
// Workgroups of 256 invocations, 8 subgroups of 32. Invocation lid is
// (ty, tx) = (lid/16, lid%16) for the scalar parts, and owns the scores
// of rows ty+16a and columns 2tx+32(b/2)+(b%2) (a, b < 4) of a tile:
// adjacent pairs, so a 16-bit tile is written a uint at a time.
// Fragments: a 64×64 score tile is 4×4 fragments, subgroup sg owning row
// block sg/2 and column blocks 2(sg%2), 2(sg%2)+1; a 64×MAXD output is
// 4×(MAXD/16), subgroup sg owning row block sg/2 and column blocks
// (sg%2)·NF … +NF−1 (NF = MAXD/32), kept in registers across the tiles.
//
// Shared memory (one uint array, sh): STG, the staged operands (two
// 64-row chunks of 32 halves for a dot tile, or XK rows of MAXD halves of
// X: all 64 for MAXD 64, 32 for 128) and the forward's per-invocation row maxima; SF, a tile of fp32
// scores as the fragments store it (row stride 64), or of fp32 W (row
// stride 65), or of 16-bit W (36 uints a row); the row starts and sums;
// in the forward and dQ builds for MAXD 64, QS, the band's Q (and dO)
// rows staged once (A_ONCE below). 27 KiB, 36 KiB for the forward's
// A_ONCE build, 45 KiB for dQ's (attention_coop.go's attnCoopSharedFor).

#extension GL_KHR_memory_scope_semantics : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : enable
#extension GL_GOOGLE_include_directive : enable
#extension GL_EXT_control_flow_attributes : enable

#ifndef MAXD
#define MAXD 64
#endif

// UNROLL marks the loops over an invocation's 16 scores (s, w, dp and the
// per-row m, inv, rs, st), the fragments and the short shared-memory
// reductions: unrolled in the real builds, so those arrays are indexed by
// constants and stay in registers (left to the driver, a rolled loop
// could put them in local memory), and kept rolled in the emulated
// builds, which lavapipe compiles in time proportional to their size.
#ifdef EMULATE
// Fragments emulated: a "load" keeps (offset, stride, column-major) into
// sh, the multiply reads sh then (it is not written between the two).
// Lane l holds row l/2, columns 8·(l%2)…+7 of an accumulator.
#define MatA uvec3
#define MatB uvec3
#define MatC float[8]
#define LOAD_A(m, off, stride) m = uvec3(off, stride, 0u)
#define LOAD_B(m, off, stride) m = uvec3(off, stride, 0u)
#define LOAD_BT(m, off, stride) m = uvec3(off, stride, 1u)
#define STORE_S(m, off, stride) emuStore(m, off, stride)
#define MULADD(a, b, c) emuMulAdd(a, b, c)
#define ZERO(m) for (int e_ = 0; e_ < 8; e_++) m[e_] = 0.0
#define subgroupMemoryBarrierShared() memoryBarrierShared()
#define subgroupBarrier() barrier()
#define UNROLL [[dont_unroll]]
#elif defined(BF16)
#extension GL_KHR_cooperative_matrix : enable
#extension GL_EXT_bfloat16 : enable
#define MatA coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MatB coopmat<bfloat16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define MatC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define LOAD_A(m, off, stride) coopMatLoad(m, sh, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define LOAD_B(m, off, stride) coopMatLoad(m, sh, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define LOAD_BT(m, off, stride) coopMatLoad(m, sh, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define STORE_S(m, off, stride) coopMatStore(m, sh, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define MULADD(a, b, c) coopMatMulAdd(a, b, c)
#define ZERO(m) m = MatC(0.0)
#define UNROLL [[unroll]]
#else
#extension GL_NV_cooperative_matrix : enable
#define MatA fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatB fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define MatC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define LOAD_A(m, off, stride) coopMatLoadNV(m, sh, off, stride, false)
#define LOAD_B(m, off, stride) coopMatLoadNV(m, sh, off, stride, false)
#define LOAD_BT(m, off, stride) coopMatLoadNV(m, sh, off, stride, true)
#define STORE_S(m, off, stride) coopMatStoreNV(m, sh, off, stride, false)
#define MULADD(a, b, c) coopMatMulAddNV(a, b, c)
#define ZERO(m) m = MatC(0.0)
#define UNROLL [[unroll]]
#endif

#include "half.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufQ { float q[]; };  // [B·T, H·D]
layout(std430, set = 0, binding = 1) readonly buffer BufK { float k[]; };  // [B·T, KVH·D]
layout(std430, set = 0, binding = 2) readonly buffer BufV { float v[]; };  // [B·T, KVH·D]
layout(std430, set = 0, binding = 3) readonly buffer BufG { float g[]; };  // dO, [B·T, H·D]
// Q, K, V and dO again by 16 bytes, for stage's loads when D is a
// multiple of 4 (every row then starts 16-byte aligned).
layout(std430, set = 0, binding = 0) readonly buffer BufQ4 { vec4 q4[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufK4 { vec4 k4[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufV4 { vec4 v4[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufG4 { vec4 g4[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufPos { int pos[]; }; // [B·T]
layout(std430, set = 0, binding = 5) buffer BufStats { float stats[]; };  // [B, H, T, 2]: m, 1/l
layout(std430, set = 0, binding = 6) buffer BufRowSum { float rowsum[]; }; // [B, H, T]
layout(std430, set = 0, binding = 7) buffer BufOut { float o[]; };       // O (FORWARD) or dQ (DQ)
layout(std430, set = 0, binding = 8) buffer BufDK { float dk[]; };
layout(std430, set = 0, binding = 9) buffer BufDV { float dv[]; };
// The kept scores and dP (p.keep): 16-bit values two to a word, per
// (batch, head) a TP×TP matrix (TP, T rounded up to the tile), S from
// word 0 and dP (the backward's) after all of S.
layout(std430, set = 0, binding = 10) buffer BufKeep { uint kept[]; };

layout(push_constant) uniform Params {
	uint T, H, KVH, D;
	uint window, hasPos;
	float scale;
	uint fS, fP, fV;
	uint fO, fK, fVg;
	uint roundHeads;
	uint need;
	uint keep;
} p;

const uint TILE = 64u, SUB = 4u;
const uint CH = 32u;                 // head-dimension chunk of a staged dot operand
const uint LDC = (CH + 8u) / 2u;     // uints per staged dot row (padded by 8 halves)
const uint XK = MAXD <= 64u ? 64u : 32u; // rows of X staged at a time (all 64 when they fit STG)
const uint LDX = (MAXD + 8u) / 2u;   // uints per staged X row
const uint NF = MAXD / 32u;          // output fragments per subgroup
const uint LDW = (TILE + 8u) / 2u;   // uints per 16-bit W row
const uint STG = 0u, STG_SIZE = 2u * TILE * LDC; // ≥ XK·LDX and 64·17
const uint SF = STG_SIZE, SF_SIZE = TILE * (TILE + 1u);
const uint NONE = 0xffffffffu;
const float LOWEST = -3.402823466e38;

// A_ONCE: in the forward and dQ builds for heads up to 64 wide, the
// band's own rows of the dot products' left operands (Q, and in dQ dO
// too) are staged once for the band, in QS (64 rows of LDX uints each),
// and each key tile stages only its K (or V) rows, whole (64·LDX uints
// fit STG), so a tile's dot products take one staging and one pair of
// barriers where they took two, and the band's rows are loaded and
// narrowed once instead of once a tile. Wider heads would not fit the
// shared memory (attention_coop.go's attnCoopSharedFor).
#if (defined(FORWARD) || defined(DQ)) && MAXD <= 64
#define A_ONCE
#ifdef DQ
const uint NA = 2u;
#else
const uint NA = 1u;
#endif
#else
const uint NA = 0u;
#endif
const uint QS = SF + SF_SIZE, QS_SIZE = NA * TILE * LDX;

shared uint sh[STG_SIZE + SF_SIZE + QS_SIZE];

// narrow is fp32 v's 16-bit bits in the kernel's format, rounded to
// nearest even (gemm_coopmat.comp's): exact for the values the policy put
// there.
uint narrow(float v) {
	uint u = floatBitsToUint(v);
#ifdef BF16
	if ((u & 0xffffu) == 0u) return u >> 16;
	return toBF16(u);
#else
	uint e = (u >> 23) & 0xffu;
	if (e - 113u < 30u && (u & 0x1fffu) == 0u)
		return ((u >> 16) & 0x8000u) | (((u >> 13) & 0x3ffffu) - (112u << 10));
	return toFP16(u);
#endif
}

#ifdef EMULATE
float emuHalf(uint off, uint stride, bool colMajor, uint r, uint c) {
	// element (r, c): row-major at off + r·stride (uints) + c halves;
	// column-major at off + c·stride + r halves
	uint i = colMajor ? r : c, o = off + (colMajor ? c : r) * stride + i / 2u;
	uint h = (sh[o] >> ((i & 1u) * 16u)) & 0xffffu;
#ifdef BF16
	return uintBitsToFloat(h << 16);
#else
	return fromFP16(h);
#endif
}

float[8] emuMulAdd(uvec3 a, uvec3 b, float c[8]) {
	uint lane = gl_LocalInvocationIndex % 32u;
	UNROLL for (uint e = 0u; e < 8u; e++)
		UNROLL for (uint kk = 0u; kk < 16u; kk++)
			c[e] = fma(emuHalf(a.x, a.y, false, lane / 2u, kk), emuHalf(b.x, b.y, b.z != 0u, kk, 8u * (lane % 2u) + e), c[e]);
	return c;
}

void emuStore(float m[8], uint off, uint stride) {
	uint lane = gl_LocalInvocationIndex % 32u;
	UNROLL for (uint e = 0u; e < 8u; e++) sh[off + (lane / 2u) * stride + 8u * (lane % 2u) + e] = floatBitsToUint(m[e]);
}
#endif

uint rowStart(uint b, uint i) {
	int s = 0;
	if (p.hasPos != 0u) s = int(i) - pos[b * p.T + i];
	if (p.window > 0u) s = max(s, int(i) - int(p.window) + 1);
	return uint(clamp(s, 0, int(i)));
}

// col is the tile column of an invocation's score b (< 4).
uint col(uint tx, uint b) { return 2u * tx + 32u * (b >> 1) + (b & 1u); }

// Keeping the scores (p.keep, attention_coop.go): the pass that first
// computes a tile's scores S (rounded to the kernel's format, so exactly
// 16-bit values) and, in the backward, dP (rounded to it too) stores
// them, and what would compute them again reads them instead: the
// forward's second pass, dQ's pass, and the dK/dV kernel, which reads
// the dQ kernel's (the same products: bit for bit what it would compute,
// in the emulated builds, which sum each in d order either way). A row
// band's tiles start at its first key c0 (the least row start of its 64
// queries), so row i's key j lies at column j − c0 + KEEPL of its kept
// row: a margin of KEEPL columns before c0 (the dK/dV kernel's tiles
// start on multiples of 64 and may begin up to 63 keys before a band's
// c0), the band's tiles (less than TP + 64 columns; TP, T rounded up to
// the tile), and 2 more for the dK/dV kernel's reads of 33 words: rows
// TP + 192 columns wide.
const uint KEEPL = 64u;

// keptAt is the word of kept matrix m (0 S, 1 dP) holding columns c, c+1
// (c even) of row i in plane (batch, head) bh.
uint keptAt(uint m, uint bh, uint i, uint c) {
	uint tp = (p.T + TILE - 1u) / TILE * TILE;
	return ((m * gl_NumWorkGroups.z * p.H + bh) * tp + i) * ((tp + 192u) / 2u) + c / 2u;
}

float widenKept(uint h) {
#ifdef BF16
	return uintBitsToFloat(h << 16);
#else
	return fromFP16(h);
#endif
}

// keepOwn stores the invocation's 16 values x of the tile at rows r0…,
// kept columns c0… (the scores' layout; c0 even) into kept matrix m;
// loadOwn reads them back (the same invocation: no barrier between).
void keepOwn(float x[16], uint m, uint bh, uint r0, uint c0) {
	uint tx = gl_LocalInvocationIndex % 16u, ty = gl_LocalInvocationIndex / 16u;
	[[unroll]] for (uint a = 0u; a < SUB; a++)
		[[unroll]] for (uint b = 0u; b < SUB; b += 2u)
			kept[keptAt(m, bh, r0 + ty + 16u * a, c0 + col(tx, b))] = narrow(x[a * SUB + b]) | (narrow(x[a * SUB + b + 1u]) << 16);
}

void loadOwn(out float x[16], uint m, uint bh, uint r0, uint c0) {
	uint tx = gl_LocalInvocationIndex % 16u, ty = gl_LocalInvocationIndex / 16u;
	[[unroll]] for (uint a = 0u; a < SUB; a++)
		[[unroll]] for (uint b = 0u; b < SUB; b += 2u) {
			uint w = kept[keptAt(m, bh, r0 + ty + 16u * a, c0 + col(tx, b))];
			x[a * SUB + b] = widenKept(w & 0xffffu);
			x[a * SUB + b + 1u] = widenKept(w >> 16);
		}
}

// ld is element at of buffer which: 0 q, 1 k, 2 v, 3 dO.
float ld(uint which, uint at) {
	switch (which) {
	case 0u: return q[at];
	case 1u: return k[at];
	case 2u: return v[at];
	default: return g[at];
	}
}

// ld4 is elements 4·at…4·at+3 of buffer which.
vec4 ld4(uint which, uint at) {
	switch (which) {
	case 0u: return q4[at];
	case 1u: return k4[at];
	case 2u: return v4[at];
	default: return g4[at];
	}
}

// stage narrows rows r0… (< T) and columns c0… (< D) of buffer which
// (row r at base + r·ld), rows × cols, into sh from off, lds uints a
// row, two halves to a uint; zeros elsewhere. With D a multiple of 4 (and
// so every row's offset, c0 being a multiple of 32) four columns a load;
// else two, one at a time. One copy of each loop (not one per buffer):
// lavapipe compiles the emulated builds' code, all of it inlined, in time
// proportional to its size.
void stage(uint which, uint off, uint lds, uint rows, uint cols, uint base, uint ldr, uint r0, uint c0) {
	if (p.D % 4u == 0u) { // uniform
		uint quads = cols / 4u;
		for (uint e = gl_LocalInvocationIndex; e < rows * quads; e += 256u) {
			uint r = e / quads, c = 4u * (e % quads);
			uvec2 w = uvec2(0u);
			if (r0 + r < p.T && c0 + c < p.D) {
				vec4 x = ld4(which, (base + (r0 + r) * ldr + c0 + c) / 4u);
				w = uvec2(narrow(x.x) | (narrow(x.y) << 16), narrow(x.z) | (narrow(x.w) << 16));
			}
			sh[off + r * lds + c / 2u] = w.x;
			sh[off + r * lds + c / 2u + 1u] = w.y;
		}
		return;
	}
	uint pairs = cols / 2u;
	for (uint e = gl_LocalInvocationIndex; e < rows * pairs; e += 256u) {
		uint r = e / pairs, c = 2u * (e % pairs);
		bool inR = r0 + r < p.T;
		uint at = base + (r0 + r) * ldr + c0 + c;
		uint lo = inR && c0 + c < p.D ? narrow(ld(which, at)) : 0u;
		uint hi = inR && c0 + c + 1u < p.D ? narrow(ld(which, at + 1u)) : 0u;
		sh[off + r * lds + c / 2u] = lo | (hi << 16);
	}
}

// dotTile returns to the invocation its 16 scores of Σ_d A[a0+r][d]·
// B[b0+c][d] (rows of A and B as attention.comp's dotTile), the products
// on fragments: A's chunk row-major, B's read column-major (Bᵀ). Call in
// uniform control flow.
void dotTile(out float s[16], uint ab, uint abase, uint ald, uint a0, uint bb, uint bbase, uint bld, uint b0) {
	uint lid = gl_LocalInvocationIndex, tx = lid % 16u, ty = lid / 16u;
#ifdef EMULATE
	uint sg = lid / 32u;
#else
	uint sg = gl_SubgroupID;
#endif
	uint rb = sg / 2u, cb = 2u * (sg % 2u);
	MatC c0, c1;
	ZERO(c0);
	ZERO(c1);
	for (uint d0 = 0u; d0 < p.D; d0 += CH) {
		stage(ab, STG, LDC, TILE, CH, abase, ald, a0, d0);
		stage(bb, STG + TILE * LDC, LDC, TILE, CH, bbase, bld, b0, d0);
		barrier();
		UNROLL for (uint kk = 0u; kk < CH; kk += 16u) {
			MatA fa;
			MatB f0, f1;
			LOAD_A(fa, STG + rb * 16u * LDC + kk / 2u, LDC);
			LOAD_BT(f0, STG + TILE * LDC + cb * 16u * LDC + kk / 2u, LDC);
			LOAD_BT(f1, STG + TILE * LDC + (cb + 1u) * 16u * LDC + kk / 2u, LDC);
			c0 = MULADD(fa, f0, c0);
			c1 = MULADD(fa, f1, c1);
		}
		barrier();
	}
	STORE_S(c0, SF + rb * 16u * TILE + cb * 16u, TILE);
	STORE_S(c1, SF + rb * 16u * TILE + (cb + 1u) * 16u, TILE);
	barrier();
	[[unroll]] for (uint a = 0u; a < SUB; a++)
		[[unroll]] for (uint b = 0u; b < SUB; b++) s[a * SUB + b] = uintBitsToFloat(sh[SF + (ty + 16u * a) * TILE + col(tx, b)]);
	barrier();
}

#ifdef A_ONCE
// dotTileA is dotTile with A's 64 rows staged in sh from aOff (LDX uints
// a row, every column up to MAXD, zeros past D): B's whole tile is staged
// at once, and the fragments are those dotTile multiplies, in its order
// (K steps of 16 up to D rounded up to CH), so the sums are the same.
void dotTileA(out float s[16], uint aOff, uint bb, uint bbase, uint bld, uint b0) {
	uint lid = gl_LocalInvocationIndex, tx = lid % 16u, ty = lid / 16u;
#ifdef EMULATE
	uint sg = lid / 32u;
#else
	uint sg = gl_SubgroupID;
#endif
	uint rb = sg / 2u, cb = 2u * (sg % 2u);
	uint dEnd = (p.D + CH - 1u) / CH * CH;
	MatC c0, c1;
	ZERO(c0);
	ZERO(c1);
	stage(bb, STG, LDX, TILE, MAXD, bbase, bld, b0, 0u);
	barrier();
	UNROLL for (uint kk = 0u; kk < MAXD; kk += 16u) {
		if (kk < dEnd) { // uniform
			MatA fa;
			MatB f0, f1;
			LOAD_A(fa, aOff + rb * 16u * LDX + kk / 2u, LDX);
			LOAD_BT(f0, STG + cb * 16u * LDX + kk / 2u, LDX);
			LOAD_BT(f1, STG + (cb + 1u) * 16u * LDX + kk / 2u, LDX);
			c0 = MULADD(fa, f0, c0);
			c1 = MULADD(fa, f1, c1);
		}
	}
	barrier();
	STORE_S(c0, SF + rb * 16u * TILE + cb * 16u, TILE);
	STORE_S(c1, SF + rb * 16u * TILE + (cb + 1u) * 16u, TILE);
	barrier();
	[[unroll]] for (uint a = 0u; a < SUB; a++)
		[[unroll]] for (uint b = 0u; b < SUB; b++) s[a * SUB + b] = uintBitsToFloat(sh[SF + (ty + 16u * a) * TILE + col(tx, b)]);
	barrier();
}
#endif

// dotPair is dotTile for buffers (ab0, bb0) into s and, when n is 2,
// for (ab1, bb1) into s2 (same rows), through one call site: one copy of
// dotTile's code. With A_ONCE, A is the band's staged rows: Q (ab 0) at
// QS, dO (ab 3) after it.
void dotPair(out float s[16], out float s2[16], uint n, uint ab0, uint bb0, uint ab1, uint bb1, uint abase, uint ald, uint a0, uint bbase, uint bld, uint b0) {
	[[dont_unroll]] for (uint t = 0u; t < n; t++) {
		float x[16];
#ifdef A_ONCE
		uint ab = t == 0u ? ab0 : ab1;
		dotTileA(x, ab == 0u ? QS : QS + TILE * LDX, t == 0u ? bb0 : bb1, bbase, bld, b0);
#else
		dotTile(x, t == 0u ? ab0 : ab1, abase, ald, a0, t == 0u ? bb0 : bb1, bbase, bld, b0);
#endif
		if (t == 0u) s = x;
		else s2 = x;
	}
}

// setW writes the invocation's 16 values of the fp32 tile W (row stride
// 65 in SF).
void setW(float w[16]) {
	uint lid = gl_LocalInvocationIndex, tx = lid % 16u, ty = lid / 16u;
	[[unroll]] for (uint a = 0u; a < SUB; a++)
		[[unroll]] for (uint b = 0u; b < SUB; b++) sh[SF + (ty + 16u * a) * (TILE + 1u) + col(tx, b)] = floatBitsToUint(w[a * SUB + b]);
}

float getW(uint r, uint c) { return uintBitsToFloat(sh[SF + r * (TILE + 1u) + c]); }

// setW16 writes the invocation's 16 values, already of the kernel's
// format, to the 16-bit tile W (LDW uints a row in SF), a pair a uint.
void setW16(float w[16]) {
	uint lid = gl_LocalInvocationIndex, tx = lid % 16u, ty = lid / 16u;
	[[unroll]] for (uint a = 0u; a < SUB; a++)
		[[unroll]] for (uint b = 0u; b < SUB; b += 2u)
			sh[SF + (ty + 16u * a) * LDW + col(tx, b) / 2u] = narrow(w[a * SUB + b]) | (narrow(w[a * SUB + b + 1u]) << 16);
}

// accTile adds W·X to the subgroup's fragments acc, W the 16-bit tile
// in SF (64×64), X rows x0… of buffer xb (row r at xbase + r·xld), XK
// rows at a time, keys (or queries) in order. Call in uniform control
// flow, after setW16 (its barrier is here).
void accTile(inout MatC acc[NF], uint xb, uint xbase, uint xld, uint x0) {
#ifdef EMULATE
	uint sg = gl_LocalInvocationIndex / 32u;
#else
	uint sg = gl_SubgroupID;
#endif
	uint rb = sg / 2u, cb0 = (sg % 2u) * NF;
	for (uint k0 = 0u; k0 < TILE; k0 += XK) {
		barrier(); // W written; the previous chunk's X read
		stage(xb, STG, LDX, XK, MAXD, xbase, xld, x0 + k0, 0u);
		barrier();
		UNROLL for (uint kk = 0u; kk < XK; kk += 16u) {
			MatA fa;
			LOAD_A(fa, SF + rb * 16u * LDW + (k0 + kk) / 2u, LDW);
			UNROLL for (uint f = 0u; f < NF; f++) {
				if ((cb0 + f) * 16u < p.D) { // subgroup-uniform
					MatB fb;
					LOAD_B(fb, STG + kk * LDX + (cb0 + f) * 8u, LDX);
					acc[f] = MULADD(fa, fb, acc[f]);
				}
			}
		}
	}
	barrier(); // before W and STG are written again
}

// The output, subgroup by subgroup through a 16×16 fp32 scratch in SF
// (256 uints a subgroup): fragment f of the subgroup's goes to rows
// rb·16…, columns (cb0+f)·16…; emitAt gives each lane's 8 values
// (row l/2, columns 8(l%2)…) to put.
uint scratch() {
#ifdef EMULATE
	return SF + (gl_LocalInvocationIndex / 32u) * 256u;
#else
	return SF + gl_SubgroupID * 256u;
#endif
}

float prob(float s, float m, float inv) { return rnd(exp(s - m) * inv, p.fP); }

void scores(inout float s[16]) {
	UNROLL for (uint z = 0u; z < 16u; z++) s[z] = rnd(p.scale * s[z], p.fS);
}

void probGrads(inout float s[16]) {
	UNROLL for (uint z = 0u; z < 16u; z++) s[z] = rnd(rnd(s[z], p.fV), p.fP);
}

#if defined(FORWARD) || defined(DQ)
shared uint starts[TILE];
shared float rowA[TILE], rowB[TILE];

void main() {
	uint lid = gl_LocalInvocationIndex, tx = lid % 16u, ty = lid / 16u;
#ifdef EMULATE
	uint sg = lid / 32u, lane = lid % 32u;
#else
	uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
#endif
	// Heads along x, row bands along y, the last band first: a causal
	// band's work grows with its index, and the GPU starts workgroups in
	// x-then-y order, so the longest start first and the short ones fill
	// in behind them (longest first; in index order the longest bands
	// of the last heads ran alone at the end).
	uint b = gl_WorkGroupID.z, h = gl_WorkGroupID.x, r0 = (gl_NumWorkGroups.y - 1u - gl_WorkGroupID.y) * TILE;
	uint kh = h / (p.H / p.KVH);
	uint qw = p.H * p.D, kw = p.KVH * p.D;
	uint qbase = b * p.T * qw + h * p.D, kbase = b * p.T * kw + kh * p.D;
	uint sbase = (b * p.H + h) * p.T;
	uint rEnd = min(r0 + TILE, p.T);
	if (lid < TILE) {
		starts[lid] = r0 + lid < p.T ? rowStart(b, r0 + lid) : NONE;
		rowA[lid] = 0.0;
		rowB[lid] = 0.0;
	}
#ifdef A_ONCE
	// The band's rows of Q (and dO), staged once (the barrier below).
	stage(0u, QS, LDX, TILE, MAXD, qbase, qw, r0, 0u);
#ifdef DQ
	stage(3u, QS + TILE * LDX, LDX, TILE, MAXD, qbase, qw, r0, 0u);
#endif
#endif
	barrier();
	uint c0 = NONE;
	UNROLL for (uint x = 0u; x < TILE; x++) c0 = min(c0, starts[x]);
	uint bh = b * p.H + h;
	uint st[SUB];
	[[unroll]] for (uint a = 0u; a < SUB; a++) st[a] = starts[ty + 16u * a];
	MatC acc[NF];
	UNROLL for (uint f = 0u; f < NF; f++) ZERO(acc[f]);
	float s[16], w[16];
	float m[SUB], inv[SUB];

	// The passes in one loop, each tile's dot products and W·X through
	// one call site of dotPair and accTile (the emulated builds' compile
	// time on lavapipe is their code's size).
#ifdef FORWARD
	// Pass 0: attention.comp's online max and sum (the row maxima in STG,
	// the exp(s − m) in the fp32 W). Pass 1: O = round(fV, P)·V.
	float mRow = LOWEST, lRow = 0.0;
	[[unroll]] for (uint a = 0u; a < SUB; a++) m[a] = LOWEST;
	float outScale = 1.0;
	uint passes = 2u, products = 1u, xb = 2u;
#else
	// Pass 0: rowsum = Σ_j P ⊙ dP in key order, one invocation per row.
	// Pass 1: dQ = scale·dS·K.
	[[unroll]] for (uint a = 0u; a < SUB; a++) {
		uint i = r0 + ty + 16u * a;
		m[a] = i < p.T ? stats[2u * (sbase + i)] : 0.0;
		inv[a] = i < p.T ? stats[2u * (sbase + i) + 1u] : 0.0;
	}
	float outScale = p.scale;
	uint passes = (p.need & 1u) != 0u ? 2u : 1u, products = 2u, xb = 1u;
	float rs[SUB];
#endif
	float dp[16];
	[[dont_unroll]] for (uint pass = 0u; pass < passes; pass++) {
		for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
			if (p.keep != 0u && pass != 0u) { // uniform
				loadOwn(s, 0u, bh, r0, j0 - c0 + KEEPL);
#ifdef DQ
				loadOwn(dp, 1u, bh, r0, j0 - c0 + KEEPL);
#endif
			} else {
				dotPair(s, dp, products, 0u, 1u, 3u, 2u, qbase, qw, r0, kbase, kw, j0);
				scores(s);
#ifdef DQ
				probGrads(dp);
#endif
				if (p.keep != 0u) {
					keepOwn(s, 0u, bh, r0, j0 - c0 + KEEPL);
#ifdef DQ
					keepOwn(dp, 1u, bh, r0, j0 - c0 + KEEPL);
#endif
				}
			}
#ifdef FORWARD
			if (pass == 0u) {
				[[unroll]] for (uint a = 0u; a < SUB; a++) {
					uint i = r0 + ty + 16u * a;
					float mx = LOWEST;
					[[unroll]] for (uint bb = 0u; bb < SUB; bb++) {
						uint j = j0 + col(tx, bb);
						if (j >= st[a] && j <= i) mx = max(mx, s[a * SUB + bb]);
					}
					sh[STG + (ty + 16u * a) * 17u + tx] = floatBitsToUint(mx);
				}
				barrier();
				UNROLL for (uint a = 0u; a < SUB; a++) {
					uint i = r0 + ty + 16u * a;
					float mx = m[a];
					UNROLL for (uint x = 0u; x < 16u; x++) mx = max(mx, uintBitsToFloat(sh[STG + (ty + 16u * a) * 17u + x]));
					m[a] = mx;
					UNROLL for (uint bb = 0u; bb < SUB; bb++) {
						uint j = j0 + col(tx, bb);
						w[a * SUB + bb] = j >= st[a] && j <= i ? exp(s[a * SUB + bb] - mx) : 0.0;
					}
				}
				setW(w);
				barrier();
				if (lid < TILE) {
					float mx = mRow;
					UNROLL for (uint x = 0u; x < 16u; x++) mx = max(mx, uintBitsToFloat(sh[STG + lid * 17u + x]));
					float l = lRow > 0.0 ? lRow * exp(mRow - mx) : 0.0;
					UNROLL for (uint x = 0u; x < TILE; x++) l += getW(lid, x);
					mRow = mx;
					lRow = l;
				}
				barrier();
				continue;
			}
			UNROLL for (uint a = 0u; a < SUB; a++) {
				uint i = r0 + ty + 16u * a;
				UNROLL for (uint bb = 0u; bb < SUB; bb++) {
					uint j = j0 + col(tx, bb);
					w[a * SUB + bb] = i < p.T && j >= st[a] && j <= i ? rnd(prob(s[a * SUB + bb], m[a], inv[a]), p.fV) : 0.0;
				}
			}
#else
			if (pass == 0u) {
				UNROLL for (uint a = 0u; a < SUB; a++) {
					uint i = r0 + ty + 16u * a;
					UNROLL for (uint bb = 0u; bb < SUB; bb++) {
						uint j = j0 + col(tx, bb);
						w[a * SUB + bb] = i < p.T && j >= st[a] && j <= i ? prob(s[a * SUB + bb], m[a], inv[a]) * dp[a * SUB + bb] : 0.0;
					}
				}
				setW(w);
				barrier();
				if (lid < TILE) {
					float sum = rowA[lid];
					UNROLL for (uint x = 0u; x < TILE; x++) sum += getW(lid, x);
					rowA[lid] = sum;
				}
				barrier();
				continue;
			}
			UNROLL for (uint a = 0u; a < SUB; a++) {
				uint i = r0 + ty + 16u * a;
				UNROLL for (uint bb = 0u; bb < SUB; bb++) {
					uint j = j0 + col(tx, bb);
					w[a * SUB + bb] = i < p.T && j >= st[a] && j <= i ? rnd(prob(s[a * SUB + bb], m[a], inv[a]) * (dp[a * SUB + bb] - rs[a]), p.fS) : 0.0;
				}
			}
#endif
			setW16(w);
			accTile(acc, xb, kbase, kw, j0);
		}
		if (pass != 0u) continue;
#ifdef FORWARD
		if (lid < TILE) {
			rowB[lid] = lRow;
			if (r0 + lid < p.T) {
				stats[2u * (sbase + r0 + lid)] = mRow;
				stats[2u * (sbase + r0 + lid) + 1u] = 1.0 / lRow;
			}
		}
		barrier();
		[[unroll]] for (uint a = 0u; a < SUB; a++) inv[a] = 1.0 / rowB[ty + 16u * a];
#else
		if (lid < TILE && r0 + lid < p.T) rowsum[sbase + r0 + lid] = rowA[lid];
		[[unroll]] for (uint a = 0u; a < SUB; a++) rs[a] = rowA[ty + 16u * a];
#endif
	}
#ifdef DQ
	if ((p.need & 1u) == 0u) return;
#endif
	uint base = scratch(), rb = sg / 2u, cb0 = (sg % 2u) * NF;
	UNROLL for (uint f = 0u; f < NF; f++) {
		STORE_S(acc[f], base, 16u);
		subgroupMemoryBarrierShared();
		subgroupBarrier();
		uint i = r0 + rb * 16u + lane / 2u;
		UNROLL for (uint e = 0u; e < 8u; e++) {
			uint d = (cb0 + f) * 16u + 8u * (lane % 2u) + e;
			if (i < p.T && d < p.D) o[qbase + i * qw + d] = rnd(outScale * uintBitsToFloat(sh[base + (lane / 2u) * 16u + 8u * (lane % 2u) + e]), p.fO);
		}
		subgroupMemoryBarrierShared();
		subgroupBarrier();
	}
}
#endif

#ifdef DKV
#ifndef DKV_PART
#define DKV_PART 0
#endif
shared uint qStarts[TILE];

// loadKeptT reads the dQ kernel's kept matrix m at rows (queries) i0…,
// keys j0… (kept columns from rel = j0 − that band's c0 + KEEPL, which
// may be odd) into the invocation's 16 values in the transposed layout:
// x[4a+b] is the pair (query i0+col(tx, b), key j0+ty+16a). The dQ
// kernel stored every pair this kernel uses (it computes each tile it
// visits in full, and visits every key from c0 to its last query); the
// columns it never wrote (before c0, past its last tile) hold pairs the
// masks drop, and the caller zeroes them. Through SF: 64 rows of the 33 words holding the 64 columns,
// 33 words a row (no two lanes of a subgroup on one bank). Uniform
// control flow.
void loadKeptT(out float x[16], uint m, uint bh, uint i0, uint rel) {
	uint lid = gl_LocalInvocationIndex, tx = lid % 16u, ty = lid / 16u;
	for (uint e = lid; e < TILE * 33u; e += 256u) {
		uint r = e / 33u, c = e % 33u;
		sh[SF + e] = kept[keptAt(m, bh, i0 + r, rel & ~1u) + c];
	}
	barrier();
	[[unroll]] for (uint a = 0u; a < SUB; a++)
		[[unroll]] for (uint b = 0u; b < SUB; b++) {
			uint hh = (rel & 1u) + ty + 16u * a;
			uint w = sh[SF + col(tx, b) * 33u + hh / 2u];
			x[a * SUB + b] = widenKept((w >> ((hh & 1u) * 16u)) & 0xffffu);
		}
	barrier();
}

void main() {
	uint lid = gl_LocalInvocationIndex, tx = lid % 16u, ty = lid / 16u;
#ifdef EMULATE
	uint sg = lid / 32u, lane = lid % 32u;
#else
	uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
#endif
	// Heads along x, key bands along y: the first key band, which the
	// most queries see, starts first (the forward's longest first).
	uint b = gl_WorkGroupID.z, h = gl_WorkGroupID.x, j0 = gl_WorkGroupID.y * TILE;
	uint group = p.H / p.KVH, kh = h / group;
	uint qw = p.H * p.D, kw = p.KVH * p.D;
	uint kbase = b * p.T * kw + kh * p.D;
	uint qbase = b * p.T * qw + h * p.D;
	uint sbase = (b * p.H + h) * p.T;
	uint last = min(j0 + TILE, p.T) - 1u;
	uint qEnd = p.window > 0u ? min(p.T, last + p.window) : p.T;
	// DKV_PART 1 builds dK alone, 2 dV alone (the split builds: each holds
	// one set of accumulators, so fewer registers and more workgroups an
	// SM; both read the kept scores); 0, both.
	bool needK = (p.need & 2u) != 0u && DKV_PART != 2, needV = (p.need & 4u) != 0u && DKV_PART != 1;
	float s[16], dp[16], w[16];
	MatC accK[NF], accV[NF];
	UNROLL for (uint f = 0u; f < NF; f++) {
		ZERO(accK[f]);
		ZERO(accV[f]);
	}
	for (uint i0 = j0; i0 < qEnd; i0 += TILE) {
		if (lid < TILE) qStarts[lid] = i0 + lid < p.T ? rowStart(b, i0 + lid) : NONE;
		barrier();
		uint first = qStarts[0];
		UNROLL for (uint x = 1u; x < TILE; x++) first = min(first, qStarts[x]);
		uint st[SUB];
		[[unroll]] for (uint bb = 0u; bb < SUB; bb++) st[bb] = qStarts[col(tx, bb)];
		barrier();
		if (first > last) continue; // uniform
		float m[SUB], inv[SUB], rs[SUB];
		[[unroll]] for (uint bb = 0u; bb < SUB; bb++) {
			uint i = i0 + col(tx, bb);
			bool inT = i < p.T;
			m[bb] = inT ? stats[2u * (sbase + i)] : 0.0;
			inv[bb] = inT ? stats[2u * (sbase + i) + 1u] : 0.0;
			rs[bb] = inT && needK ? rowsum[sbase + i] : 0.0;
		}
		// s[4a+b]: the pair (query i0+col(tx, b), key j0+ty+16a)
		// and dp[4a+b] dO·V's (dK's only)
		uint bh = b * p.H + h;
		if (p.keep != 0u) { // uniform
			loadKeptT(s, 0u, bh, i0, j0 + KEEPL - first);
			if (needK) loadKeptT(dp, 1u, bh, i0, j0 + KEEPL - first);
		} else {
			dotPair(s, dp, needK ? 2u : 1u, 1u, 0u, 2u, 3u, kbase, kw, j0, qbase, qw, i0);
			scores(s);
			if (needK) probGrads(dp);
		}
		UNROLL for (uint a = 0u; a < SUB; a++) {
			uint j = j0 + ty + 16u * a;
			UNROLL for (uint bb = 0u; bb < SUB; bb++) {
				uint i = i0 + col(tx, bb);
				bool ok = j < p.T && i < p.T && j >= st[bb] && j <= i;
				s[a * SUB + bb] = ok ? prob(s[a * SUB + bb], m[bb], inv[bb]) : 0.0;
				dp[a * SUB + bb] = ok ? dp[a * SUB + bb] : 0.0; // kept: may be what was never written
			}
		}
		if (needV) {
			UNROLL for (uint z = 0u; z < 16u; z++) w[z] = rnd(s[z], p.fV);
			setW16(w);
			accTile(accV, 3u, qbase, qw, i0);
		}
		if (needK) {
			UNROLL for (uint a = 0u; a < SUB; a++) {
				UNROLL for (uint bb = 0u; bb < SUB; bb++) w[a * SUB + bb] = rnd(s[a * SUB + bb] * (dp[a * SUB + bb] - rs[bb]), p.fS);
			}
			setW16(w);
			accTile(accK, 0u, qbase, qw, i0);
		}
	}
	uint shares = p.T * gl_NumWorkGroups.z * qw;
	uint base = scratch(), rb = sg / 2u, cb0 = (sg % 2u) * NF;
	uint j = j0 + rb * 16u + lane / 2u;
	UNROLL for (uint f = 0u; f < NF; f++) {
		UNROLL for (uint which = 0u; which < 2u; which++) { // dK, then dV
			if (!(which == 0u ? needK : needV)) continue; // uniform
			if (which == 0u) {
				STORE_S(accK[f], base, 16u);
			} else {
				STORE_S(accV[f], base, 16u);
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
			UNROLL for (uint e = 0u; e < 8u; e++) {
				uint d = (cb0 + f) * 16u + 8u * (lane % 2u) + e;
				if (j >= p.T || d >= p.D) continue;
				float x = uintBitsToFloat(sh[base + (lane / 2u) * 16u + 8u * (lane % 2u) + e]);
				if (which == 0u) {
					x = p.scale * x;
					if ((p.roundHeads & 1u) != 0u) x = rnd(x, p.fK);
				} else if ((p.roundHeads & 2u) != 0u) {
					x = rnd(x, p.fVg);
				}
				if (group == 1u) {
					uint idx = kbase + j * kw + d;
					if (which == 0u) dk[idx] = rnd(x, p.fK);
					else dv[idx] = rnd(x, p.fVg);
				} else {
					o[(which == 0u ? 0u : shares) + qbase + j * qw + d] = x;
				}
			}
			subgroupMemoryBarrierShared();
			subgroupBarrier();
		}
	}
}
#endif
