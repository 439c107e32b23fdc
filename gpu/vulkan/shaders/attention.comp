#version 450
#extension GL_EXT_control_flow_attributes : require
// Causal grouped-query attention, tiled (flash-style): no [T, T] matrix is
// ever stored. Compiled three times per head-dimension class (see
// build.txt; MAXD is the largest head dimension a variant takes, 64, 128
// or 256, which sizes its accumulators):
//   -DFORWARD  O = round(fO, round(fV, P)·V), P = round(fP, softmax(S)),
//              S = round(fS, scale·Q·Kᵀ); saves each query row's softmax
//              max m and reciprocal sum 1/l in stats.
//   -DDQ       per query row: rowsum = Σ_j P ⊙ dP (softmax's own backward
//              sum, with dP = round(fP, round(fV, dO·Vᵀ)), as the CPU forms
//              it: with 16-bit formats it is not rowsum(dO ⊙ O)), then
//              dQ = scale·dS·K with dS = round(fS, P ⊙ (dP − rowsum)).
//   -DDKV      per key row and query head h: dV_h = round(fV, P)ᵀ·dO,
//              dK_h = scale·dSᵀ·Q, each rounded to its gradient's format
//              when roundHeads says so; without grouping (H = KVH) they
//              are dK and dV, rounded to their formats, and with it each
//              head's share goes to o ([2][B·T, H·D], dK's then dV's) for
//              attention_sum.comp's fp32 sum over the group in head order
//              (PyTorch's repeat_kv backward). A workgroup per query head
//              rather than per key/value head: the group's heads run in
//              parallel, and the longest workgroup (the first key block's,
//              which every later query sees) is a group's times shorter.
// P is recomputed from the saved stats as round(fP, exp(S − m)·(1/l)),
// the CPU's operations on the same rounded scores. The backward runs DQ
// (which writes rowsum) and then DKV.
//
// Query row i of batch row b attends to keys start(i)..i: start is 0, or
// i − pos[b·T+i] (its document's first token) when hasPos, raised to
// i − window + 1 when window > 0 (nn.AttentionShape.starts).
//
// Workgroups of 16×16 invocations: one per (64 query rows, head, batch
// row) for FORWARD and DQ, one per (64 key rows, query head, batch
// row) for DKV, walking 64×64 tiles of scores. Invocation (ty, tx) owns
// the 4×4 scores of rows ty+16a and columns tx+16b (a, b < 4) of a tile,
// and output rows ty+16a's columns tx, tx+16, ... (register blocking:
// each shared load feeds two to four FMAs where one score per
// invocation fed one FMA with two loads). Dot products stage 64×16
// chunks of both operands in shared memory with coalesced loads; the
// probability (or score gradient) tile W is kept whole, 64×64, and the
// other operand of W·X is staged 64 rows × 32 columns at a time. Shared
// memory: under 26 KiB (lavapipe allows 32).
//
// Every sum runs in a fixed order with no atomics, so results are the
// same run to run: each score's dot product is one invocation's fma
// chain in d order; W·X sums over keys (or queries) in order, tile after
// tile; rowsum adds a row's P ⊙ dP in key order (one invocation per row);
// heads in order. The forward's max and sum are online over 64-key tiles:
// per tile the row's max is raised (exact, any order), the tile's exp(s −
// m) are formed in parallel and added in key order to the previous sum
// rescaled by exp(m_old − m) — the CPU takes the row's max first, so l
// may differ from its value by the rescaling's rounding (an ulp or so).
//
// Cost per causal query-key pair, in HeadDim-long products: the forward
// 3 (the scores twice: once for the row's max and sum, once to round P
// before P·V, as the CPU does), the backward 9 (scores and dP twice in
// DQ, once more in DKV, with dQ, dK and dV), where flash attention's
// usual 2 and 5 use rowsum(dO ⊙ O) and accumulate dQ with atomics: the
// former is not the CPU's value once O is rounded to 16 bits, the
// latter not deterministic.

#ifndef MAXD
#define MAXD 256
#endif

layout(local_size_x = 16, local_size_y = 16, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufQ { float q[]; };  // [B·T, H·D]
layout(std430, set = 0, binding = 1) readonly buffer BufK { float k[]; };  // [B·T, KVH·D]
layout(std430, set = 0, binding = 2) readonly buffer BufV { float v[]; };  // [B·T, KVH·D]
layout(std430, set = 0, binding = 3) readonly buffer BufG { float g[]; };  // dO, [B·T, H·D]
layout(std430, set = 0, binding = 4) readonly buffer BufPos { int pos[]; }; // [B·T]
layout(std430, set = 0, binding = 5) buffer BufStats { float stats[]; };  // [B, H, T, 2]: m, 1/l
layout(std430, set = 0, binding = 6) buffer BufRowSum { float rowsum[]; }; // [B, H, T]
layout(std430, set = 0, binding = 7) buffer BufOut { float o[]; };       // O (FORWARD) or dQ (DQ)
layout(std430, set = 0, binding = 8) buffer BufDK { float dk[]; };
layout(std430, set = 0, binding = 9) buffer BufDV { float dv[]; };

layout(push_constant) uniform Params {
	uint T, H, KVH, D;
	uint window, hasPos;
	float scale;
	uint fS, fP, fV;   // formats of scores, softmax, values: 0 fp32, 1 bf16, 2 fp16
	uint fO, fK, fVg;  // formats of O or dQ, of dK, of dV
	uint roundHeads;   // DKV: bit 0 rounds each head's dK to fK, bit 1 each dV to fVg
	uint need;         // DQ: bit 0 writes dQ; DKV: bit 1 dK, bit 2 dV
} p;

// TILE rows (queries, or keys in DKV) per workgroup and keys (queries)
// per step; each invocation owns SUB of each, 16 apart.
const uint TILE = 64u, SUB = 4u, CH = 16u, XC = 32u;
const uint NCOL = MAXD / 16u;      // output columns per row and invocation
const uint LDA = CH + 1u;          // padded row of a staged dot operand
const uint NONE = 0xffffffffu;
const float LOWEST = -3.402823466e38;

// AB holds the two staged dot-product operands (TILE×CH each), then the
// staged X of W·X (TILE×XC), or the forward's per-invocation row maxima.
shared float AB[2u * TILE * LDA];
shared float W[TILE][TILE + 1u]; // a tile of probabilities or score gradients

// Rounding to 16-bit formats kept in fp32, round to nearest even, in
// integer code: elementwise.comp's, bit for bit amp.BF16.Round and
// amp.FP16.Round.
uint toBF16(uint u) {
	if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;
	return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

uint toFP16(uint u) {
	uint sign = (u >> 16) & 0x8000u;
	uint e = (u >> 23) & 0xffu;
	uint coef = u & 0x007fffffu;
	if (e == 0xffu) return sign | 0x7c00u | (coef != 0u ? 0x0200u : 0u) | (coef >> 13);
	int halfExp = int(e) - 127 + 15;
	if (halfExp >= 0x1f) return sign | 0x7c00u;
	if (halfExp <= 0) {
		if (14 - halfExp > 24) return sign;
		uint c = coef | 0x00800000u;
		uint halfCoef = c >> uint(14 - halfExp);
		uint roundBit = 1u << uint(13 - halfExp);
		if ((c & roundBit) != 0u && (c & (3u * roundBit - 1u)) != 0u) halfCoef++;
		return sign | halfCoef;
	}
	uint h = sign | (uint(halfExp) << 10) | (coef >> 13);
	if ((coef & 0x1000u) != 0u && (coef & 0x2fffu) != 0u) h++;
	return h;
}

float fromFP16(uint h) {
	uint sign = (h & 0x8000u) << 16;
	uint e = (h >> 10) & 0x1fu;
	uint m = h & 0x3ffu;
	if (e == 0x1fu) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
	if (e == 0u) {
		float x = float(m) * (1.0 / 16777216.0); // m · 2^-24, exact
		return sign != 0u ? -x : x;
	}
	return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

float rnd(float x, uint f) {
	if (f == 1u) return uintBitsToFloat(toBF16(floatBitsToUint(x)) << 16);
	if (f == 2u) return fromFP16(toFP16(floatBitsToUint(x)));
	return x;
}

// rowStart is the first key query row i of batch row b attends to,
// clamped to 0..i.
uint rowStart(uint b, uint i) {
	int s = 0;
	if (p.hasPos != 0u) s = int(i) - pos[b * p.T + i];
	if (p.window > 0u) s = max(s, int(i) - int(p.window) + 1);
	return uint(clamp(s, 0, int(i)));
}

// STAGE copies rows r0.. r0+ROWS−1 (those < T), columns c0.. c0+COLS−1
// (those < D) of BUF, row r at BASE + r·LD, to AB from OFF with row
// stride STRIDE, zeros elsewhere; consecutive invocations read
// consecutive columns. One copy per buffer, chosen outside the loop.
#define STAGE(BUF, OFF, STRIDE, ROWS, COLS, BASE, LD, R0, C0) \
	for (uint e = gl_LocalInvocationIndex; e < ROWS * COLS; e += 256u) { \
		uint r = e / COLS, c = e % COLS; \
		AB[OFF + r * STRIDE + c] = R0 + r < p.T && C0 + c < p.D ? BUF[BASE + (R0 + r) * LD + C0 + c] : 0.0; \
	}

// stage is STAGE from buffer which: 0 q, 1 k, 2 v, 3 dO.
void stage(uint which, uint off, uint stride, uint rows, uint cols, uint base, uint ld, uint r0, uint c0) {
	switch (which) {
	case 0u: STAGE(q, off, stride, rows, cols, base, ld, r0, c0) break;
	case 1u: STAGE(k, off, stride, rows, cols, base, ld, r0, c0) break;
	case 2u: STAGE(v, off, stride, rows, cols, base, ld, r0, c0) break;
	default: STAGE(g, off, stride, rows, cols, base, ld, r0, c0) break;
	}
}

// dotTile returns to invocation (ty, tx) in s[4a+b] Σ_d A[a0+ty+16a][d]·
// B[b0+tx+16b][d] over d < D as one fma chain in d order (the zero
// padding past D adds exact zeros), where row r of A is at abase + r·ald
// of buffer ab (B likewise) and rows ≥ T read as zero. Call in uniform
// control flow.
void dotTile(out float s[16], uint ab, uint abase, uint ald, uint a0, uint bb, uint bbase, uint bld, uint b0) {
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
	[[unroll]] for (uint z = 0u; z < 16u; z++) s[z] = 0.0;
	for (uint d0 = 0u; d0 < p.D; d0 += CH) {
		stage(ab, 0u, LDA, TILE, CH, abase, ald, a0, d0);
		stage(bb, TILE * LDA, LDA, TILE, CH, bbase, bld, b0, d0);
		barrier();
		for (uint c = 0u; c < CH; c++) {
			float av[SUB], bv[SUB];
			[[unroll]] for (uint a = 0u; a < SUB; a++) av[a] = AB[(ty + 16u * a) * LDA + c];
			[[unroll]] for (uint b = 0u; b < SUB; b++) bv[b] = AB[TILE * LDA + (tx + 16u * b) * LDA + c];
			[[unroll]] for (uint a = 0u; a < SUB; a++) {
				[[unroll]] for (uint b = 0u; b < SUB; b++) s[a * SUB + b] = fma(av[a], bv[b], s[a * SUB + b]);
			}
		}
		barrier();
	}
}

// accTile adds to invocation (ty, tx)'s acc[a·NCOL + n] Σ_x W[ty+16a][x]·
// X[x0+x][tx+16n] over x < TILE in x order, where row r of X is at
// xbase + r·xld of buffer xb. W is zero where a pair is masked (and past
// T). Call in uniform control flow, after writing W.
void accTile(inout float acc[SUB * NCOL], uint xb, uint xbase, uint xld, uint x0) {
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
	[[unroll]] for (uint c0 = 0u; c0 < MAXD; c0 += XC) {
		if (c0 < p.D) { // uniform
			stage(xb, 0u, XC, TILE, XC, xbase, xld, x0, c0);
			barrier();
			for (uint x = 0u; x < TILE; x++) {
				float x0v = AB[x * XC + tx], x1v = AB[x * XC + tx + 16u];
				[[unroll]] for (uint a = 0u; a < SUB; a++) {
					float w = W[ty + 16u * a][x];
					acc[a * NCOL + c0 / 16u] = fma(w, x0v, acc[a * NCOL + c0 / 16u]);
					acc[a * NCOL + c0 / 16u + 1u] = fma(w, x1v, acc[a * NCOL + c0 / 16u + 1u]);
				}
			}
			barrier();
		}
	}
}

// prob is the probability of a score s whose row has max m and
// reciprocal sum inv, as the softmax's format holds it.
float prob(float s, float m, float inv) { return rnd(exp(s - m) * inv, p.fP); }

// scores rounds dotTile's products as the scores' format holds them.
void scores(inout float s[16]) {
	for (uint z = 0u; z < 16u; z++) s[z] = rnd(p.scale * s[z], p.fS);
}

// probGrads rounds dotTile's dO·V products as dP's element is held on
// the CPU: in the values matmul's format, then the softmax output's.
void probGrads(inout float s[16]) {
	for (uint z = 0u; z < 16u; z++) s[z] = rnd(rnd(s[z], p.fV), p.fP);
}

#if defined(FORWARD) || defined(DQ)
shared uint starts[TILE];
shared float rowA[TILE], rowB[TILE];

void main() {
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, lid = gl_LocalInvocationIndex;
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
	barrier();
	uint c0 = NONE;
	for (uint x = 0u; x < TILE; x++) c0 = min(c0, starts[x]);
	uint st[SUB];
	[[unroll]] for (uint a = 0u; a < SUB; a++) st[a] = starts[ty + 16u * a];
	float acc[SUB * NCOL];
	[[unroll]] for (uint n = 0u; n < SUB * NCOL; n++) acc[n] = 0.0;
	float s[16];
	float m[SUB], inv[SUB];

#ifdef FORWARD
	// Pass 1: each row's max m and sum l of exp(s − m), online over the
	// tiles: per tile, each invocation's max over its keys goes to AB,
	// every invocation raises its rows' m from the 16 of the row (the
	// same operations, so the same m), forms its exp(s − m) into W, and
	// one invocation per row (lid) rescales l and adds the tile's in key
	// order.
	float mRow = LOWEST, lRow = 0.0; // invocation lid < TILE's row
	[[unroll]] for (uint a = 0u; a < SUB; a++) m[a] = LOWEST;
	for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
		dotTile(s, 0u, qbase, qw, r0, 1u, kbase, kw, j0);
		scores(s);
		[[unroll]] for (uint a = 0u; a < SUB; a++) {
			uint i = r0 + ty + 16u * a;
			float mx = LOWEST;
			[[unroll]] for (uint bb = 0u; bb < SUB; bb++) {
				uint j = j0 + tx + 16u * bb;
				if (j >= st[a] && j <= i) mx = max(mx, s[a * SUB + bb]);
			}
			AB[(ty + 16u * a) * 17u + tx] = mx;
		}
		barrier();
		for (uint a = 0u; a < SUB; a++) {
			uint i = r0 + ty + 16u * a;
			float mx = m[a];
			for (uint x = 0u; x < 16u; x++) mx = max(mx, AB[(ty + 16u * a) * 17u + x]);
			m[a] = mx;
			for (uint bb = 0u; bb < SUB; bb++) {
				uint j = j0 + tx + 16u * bb;
				W[ty + 16u * a][tx + 16u * bb] = j >= st[a] && j <= i ? exp(s[a * SUB + bb] - mx) : 0.0;
			}
		}
		barrier();
		if (lid < TILE) {
			float mx = mRow;
			for (uint x = 0u; x < 16u; x++) mx = max(mx, AB[lid * 17u + x]);
			float l = lRow > 0.0 ? lRow * exp(mRow - mx) : 0.0;
			for (uint x = 0u; x < TILE; x++) l += W[lid][x];
			mRow = mx;
			lRow = l;
		}
		barrier();
	}
	if (lid < TILE) {
		rowB[lid] = lRow;
		if (r0 + lid < p.T) {
			stats[2u * (sbase + r0 + lid)] = mRow;
			stats[2u * (sbase + r0 + lid) + 1u] = 1.0 / lRow;
		}
	}
	barrier();
	[[unroll]] for (uint a = 0u; a < SUB; a++) inv[a] = 1.0 / rowB[ty + 16u * a];
	// Pass 2: O = round(fV, P)·V over the same tiles.
	for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
		dotTile(s, 0u, qbase, qw, r0, 1u, kbase, kw, j0);
		scores(s);
		for (uint a = 0u; a < SUB; a++) {
			uint i = r0 + ty + 16u * a;
			for (uint bb = 0u; bb < SUB; bb++) {
				uint j = j0 + tx + 16u * bb;
				W[ty + 16u * a][tx + 16u * bb] = i < p.T && j >= st[a] && j <= i ? rnd(prob(s[a * SUB + bb], m[a], inv[a]), p.fV) : 0.0;
			}
		}
		accTile(acc, 2u, kbase, kw, j0);
	}
	float outScale = 1.0;
#else // DQ
	[[unroll]] for (uint a = 0u; a < SUB; a++) {
		uint i = r0 + ty + 16u * a;
		m[a] = i < p.T ? stats[2u * (sbase + i)] : 0.0;
		inv[a] = i < p.T ? stats[2u * (sbase + i) + 1u] : 0.0;
	}
	float dp[16];
	// Pass A: rowsum = Σ_j P ⊙ dP (rowA), in key order, one invocation
	// per row.
	for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
		dotTile(s, 0u, qbase, qw, r0, 1u, kbase, kw, j0);
		scores(s);
		dotTile(dp, 3u, qbase, qw, r0, 2u, kbase, kw, j0);
		probGrads(dp);
		for (uint a = 0u; a < SUB; a++) {
			uint i = r0 + ty + 16u * a;
			for (uint bb = 0u; bb < SUB; bb++) {
				uint j = j0 + tx + 16u * bb;
				W[ty + 16u * a][tx + 16u * bb] = i < p.T && j >= st[a] && j <= i ? prob(s[a * SUB + bb], m[a], inv[a]) * dp[a * SUB + bb] : 0.0;
			}
		}
		barrier();
		if (lid < TILE) {
			float sum = rowA[lid];
			for (uint x = 0u; x < TILE; x++) sum += W[lid][x];
			rowA[lid] = sum;
		}
		barrier();
	}
	if (lid < TILE && r0 + lid < p.T) rowsum[sbase + r0 + lid] = rowA[lid];
	if ((p.need & 1u) == 0u) return;
	float rs[SUB];
	[[unroll]] for (uint a = 0u; a < SUB; a++) rs[a] = rowA[ty + 16u * a];
	// Pass B: dQ = scale·dS·K.
	for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
		dotTile(s, 0u, qbase, qw, r0, 1u, kbase, kw, j0);
		scores(s);
		dotTile(dp, 3u, qbase, qw, r0, 2u, kbase, kw, j0);
		probGrads(dp);
		for (uint a = 0u; a < SUB; a++) {
			uint i = r0 + ty + 16u * a;
			for (uint bb = 0u; bb < SUB; bb++) {
				uint j = j0 + tx + 16u * bb;
				W[ty + 16u * a][tx + 16u * bb] = i < p.T && j >= st[a] && j <= i ? rnd(prob(s[a * SUB + bb], m[a], inv[a]) * (dp[a * SUB + bb] - rs[a]), p.fS) : 0.0;
			}
		}
		accTile(acc, 1u, kbase, kw, j0);
	}
	float outScale = p.scale;
#endif
	for (uint a = 0u; a < SUB; a++) {
		uint i = r0 + ty + 16u * a;
		if (i >= p.T) continue;
		for (uint n = 0u; n < NCOL; n++) {
			uint d = tx + 16u * n;
			if (d < p.D) o[qbase + i * qw + d] = rnd(outScale * acc[a * NCOL + n], p.fO);
		}
	}
}
#endif

#ifdef DKV
shared uint qStarts[TILE];

void main() {
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, lid = gl_LocalInvocationIndex;
	// Heads along x, key bands along y: the first key band, which the
	// most queries see, starts first (the forward's longest first).
	uint b = gl_WorkGroupID.z, h = gl_WorkGroupID.x, j0 = gl_WorkGroupID.y * TILE;
	uint group = p.H / p.KVH, kh = h / group;
	uint qw = p.H * p.D, kw = p.KVH * p.D;
	uint kbase = b * p.T * kw + kh * p.D;
	uint qbase = b * p.T * qw + h * p.D;
	uint sbase = (b * p.H + h) * p.T;
	uint last = min(j0 + TILE, p.T) - 1u; // the block's last key
	// Rows before j0 see none of the block's keys, nor, with a window,
	// rows after last + window − 1.
	uint qEnd = p.window > 0u ? min(p.T, last + p.window) : p.T;
	// this invocation's key rows are j0+ty+16a; tx indexes query rows and
	// columns
	bool needK = (p.need & 2u) != 0u, needV = (p.need & 4u) != 0u;
	float s[16], dp[16];
	float accK[SUB * NCOL], accV[SUB * NCOL];
	[[unroll]] for (uint n = 0u; n < SUB * NCOL; n++) {
		accK[n] = 0.0;
		accV[n] = 0.0;
	}
	for (uint i0 = j0; i0 < qEnd; i0 += TILE) {
		if (lid < TILE) qStarts[lid] = i0 + lid < p.T ? rowStart(b, i0 + lid) : NONE;
		barrier();
		uint first = qStarts[0];
		for (uint x = 1u; x < TILE; x++) first = min(first, qStarts[x]);
		uint st[SUB];
		[[unroll]] for (uint bb = 0u; bb < SUB; bb++) st[bb] = qStarts[tx + 16u * bb];
		barrier();
		if (first > last) continue; // no row of the tile sees the block (uniform)
		float m[SUB], inv[SUB], rs[SUB];
		[[unroll]] for (uint bb = 0u; bb < SUB; bb++) {
			uint i = i0 + tx + 16u * bb;
			bool inT = i < p.T;
			m[bb] = inT ? stats[2u * (sbase + i)] : 0.0;
			inv[bb] = inT ? stats[2u * (sbase + i) + 1u] : 0.0;
			rs[bb] = inT && needK ? rowsum[sbase + i] : 0.0;
		}
		// s[4a+b] is the pair (query i0+tx+16b, key j0+ty+16a): the same
		// fma chain as Q·Kᵀ's, the products' operands swapped
		dotTile(s, 1u, kbase, kw, j0, 0u, qbase, qw, i0);
		scores(s);
		for (uint a = 0u; a < SUB; a++) {
			uint j = j0 + ty + 16u * a;
			for (uint bb = 0u; bb < SUB; bb++) {
				uint i = i0 + tx + 16u * bb;
				bool ok = j < p.T && i < p.T && j >= st[bb] && j <= i;
				s[a * SUB + bb] = ok ? prob(s[a * SUB + bb], m[bb], inv[bb]) : 0.0;
			}
		}
		if (needV) {
			for (uint a = 0u; a < SUB; a++) {
				for (uint bb = 0u; bb < SUB; bb++) W[ty + 16u * a][tx + 16u * bb] = rnd(s[a * SUB + bb], p.fV);
			}
			accTile(accV, 3u, qbase, qw, i0);
		}
		if (needK) {
			dotTile(dp, 2u, kbase, kw, j0, 3u, qbase, qw, i0);
			probGrads(dp);
			for (uint a = 0u; a < SUB; a++) {
				for (uint bb = 0u; bb < SUB; bb++) {
					// s is 0 where the pair is masked, and so is dS
					W[ty + 16u * a][tx + 16u * bb] = rnd(s[a * SUB + bb] * (dp[a * SUB + bb] - rs[bb]), p.fS);
				}
			}
			accTile(accK, 0u, qbase, qw, i0);
		}
	}
	uint shares = p.T * gl_NumWorkGroups.z * qw; // B·T·H·D: dV's shares follow dK's
	for (uint a = 0u; a < SUB; a++) {
		uint j = j0 + ty + 16u * a;
		if (j >= p.T) continue;
		for (uint n = 0u; n < NCOL; n++) {
			uint d = tx + 16u * n;
			if (d >= p.D) continue;
			float xk = p.scale * accK[a * NCOL + n], xv = accV[a * NCOL + n];
			if ((p.roundHeads & 1u) != 0u) xk = rnd(xk, p.fK);
			if ((p.roundHeads & 2u) != 0u) xv = rnd(xv, p.fVg);
			if (group == 1u) {
				uint idx = kbase + j * kw + d;
				if (needK) dk[idx] = rnd(xk, p.fK);
				if (needV) dv[idx] = rnd(xv, p.fVg);
			} else {
				uint idx = qbase + j * qw + d;
				if (needK) o[idx] = xk;
				if (needV) o[shares + idx] = xv;
			}
		}
	}
}
#endif
