#version 450
// Causal grouped-query attention, tiled (flash-style): no [T, T] matrix is
// ever stored. Compiled three times (see build.txt):
//   -DFORWARD  O = round(fO, round(fV, P)·V), P = round(fP, softmax(S)),
//              S = round(fS, scale·Q·Kᵀ); saves each query row's softmax
//              max m and reciprocal sum 1/l in stats.
//   -DDQ       per query row: rowsum = Σ_j P ⊙ dP (softmax's own backward
//              sum, with dP = round(fP, round(fV, dO·Vᵀ)), as the CPU forms
//              it: with 16-bit formats it is not rowsum(dO ⊙ O)), then
//              dQ = scale·dS·K with dS = round(fS, P ⊙ (dP − rowsum)).
//   -DDKV      per key row, for each query head of its key/value head in
//              order: dV_h = round(fV, P)ᵀ·dO, dK_h = scale·dSᵀ·Q, each
//              rounded to its gradient's format before the group's fp32
//              sum when roundHeads says so (PyTorch's repeat_kv backward).
// P is recomputed from the saved stats as round(fP, exp(S − m)·(1/l)),
// the CPU's operations on the same rounded scores. The backward runs DQ
// (which writes rowsum) and then DKV.
//
// Query row i of batch row b attends to keys start(i)..i: start is 0, or
// i − pos[b·T+i] (its document's first token) when hasPos, raised to
// i − window + 1 when window > 0 (nn.AttentionShape.starts).
//
// Workgroups of 16×16 invocations: one per (16 query rows, head, batch
// row) for FORWARD and DQ, one per (16 key rows, key/value head, batch
// row) for DKV; invocation (ty, tx) owns score (ty, tx) of a 16×16 tile,
// and output row ty's columns tx, tx+16, ... (head dims up to 256).
// Every sum runs in a fixed order (dot products in d order, tile sums in
// key or query order, heads in order) with no atomics, so results are the
// same run to run. Dot products stage 16×64 chunks of both operands in
// shared memory (under 10 KiB in all).
//
// Cost per causal query-key pair, in HeadDim-long products: the forward
// 3 (the scores twice: once for the row's max and sum, once to round P
// before P·V, as the CPU does), the backward 9 (scores and dP twice in
// DQ, once more in DKV, with dQ, dK and dV), where flash attention's
// usual 2 and 5 use rowsum(dO ⊙ O) and accumulate dQ with atomics: the
// former is not the CPU's value once O is rounded to 16 bits, the
// latter not deterministic.

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

const uint TILE = 16u, CH = 64u, MAXD = 256u, NACC = MAXD / TILE;
const uint NONE = 0xffffffffu;

shared float As[TILE][CH + 1u];
shared float Bs[TILE][CH + 1u];
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

// ld reads element idx of buffer which: 0 q, 1 k, 2 v, 3 dO.
float ld(uint which, uint idx) {
	if (which == 0u) return q[idx];
	if (which == 1u) return k[idx];
	if (which == 2u) return v[idx];
	return g[idx];
}

// dotTile returns to invocation (ty, tx) Σ_d A[a0+ty][d]·B[b0+tx][d] over
// d < D, in d order, where row r of A is at abase + r·ald of buffer ab (B
// likewise) and rows ≥ T read as zero. Call in uniform control flow.
float dotTile(uint ab, uint abase, uint ald, uint a0, uint bb, uint bbase, uint bld, uint b0) {
	uint lid = gl_LocalInvocationIndex;
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
	float s = 0.0;
	for (uint d0 = 0u; d0 < p.D; d0 += CH) {
		uint n = min(CH, p.D - d0);
		for (uint e = lid; e < TILE * CH; e += TILE * TILE) {
			uint r = e / CH, c = e % CH;
			bool inD = c < n;
			As[r][c] = inD && a0 + r < p.T ? ld(ab, abase + (a0 + r) * ald + d0 + c) : 0.0;
			Bs[r][c] = inD && b0 + r < p.T ? ld(bb, bbase + (b0 + r) * bld + d0 + c) : 0.0;
		}
		barrier();
		for (uint c = 0u; c < n; c++) s = fma(As[ty][c], Bs[tx][c], s);
		barrier();
	}
	return s;
}

// accTile adds to invocation (ty, tx)'s acc[n] Σ_x W[ty][x]·X[x0+x][tx+16n]
// over the rows x0+x < T, in x order, where row r of X is at xbase + r·xld
// of buffer xb. W is zero where a pair is masked.
void accTile(inout float acc[NACC], uint xb, uint xbase, uint xld, uint x0) {
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
	uint rows = min(TILE, p.T - x0);
	for (uint x = 0u; x < rows; x++) {
		float w = W[ty][x];
		uint row = xbase + (x0 + x) * xld;
		for (uint n = 0u; n < NACC; n++) {
			uint d = tx + TILE * n;
			if (d < p.D) acc[n] = fma(w, ld(xb, row + d), acc[n]);
		}
	}
}

// prob is the probability of a score s whose row has max m and
// reciprocal sum inv, as the softmax's format holds it.
float prob(float s, float m, float inv) { return rnd(exp(s - m) * inv, p.fP); }

// score is the rounded scaled dot product of dotTile(Q or K rows, ...).
float score(uint ab, uint abase, uint ald, uint a0, uint bb, uint bbase, uint bld, uint b0) {
	return rnd(p.scale * dotTile(ab, abase, ald, a0, bb, bbase, bld, b0), p.fS);
}

// probGrad is dP's element as the CPU holds it: dO·Vᵀ in the values
// matmul's format, then the softmax output's.
float probGrad(uint abase, uint ald, uint a0, uint bbase, uint bld, uint b0, bool gFirst) {
	float x = gFirst ? dotTile(3u, abase, ald, a0, 2u, bbase, bld, b0) : dotTile(2u, abase, ald, a0, 3u, bbase, bld, b0);
	return rnd(rnd(x, p.fV), p.fP);
}

#if defined(FORWARD) || defined(DQ)
shared uint starts[TILE];
shared float rowA[TILE], rowB[TILE];

void main() {
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
	uint b = gl_WorkGroupID.z, h = gl_WorkGroupID.y, r0 = gl_WorkGroupID.x * TILE;
	uint kh = h / (p.H / p.KVH);
	uint qw = p.H * p.D, kw = p.KVH * p.D;
	uint qbase = b * p.T * qw + h * p.D, kbase = b * p.T * kw + kh * p.D;
	uint sbase = (b * p.H + h) * p.T;
	uint rEnd = min(r0 + TILE, p.T);
	uint i = r0 + ty;
	bool rowIn = i < p.T;
	if (tx == 0u) {
		starts[ty] = rowIn ? rowStart(b, i) : NONE;
		rowA[ty] = 0.0;
		rowB[ty] = 0.0;
	}
	barrier();
	uint c0 = starts[0];
	for (uint x = 1u; x < TILE; x++) c0 = min(c0, starts[x]);
	uint st = starts[ty];
	float acc[NACC];
	for (uint n = 0u; n < NACC; n++) acc[n] = 0.0;

#ifdef FORWARD
	// Pass 1: each row's max m (rowA) and sum of exp(s − m) (rowB), online:
	// the sum is rescaled when a later tile raises the max.
	for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
		W[ty][tx] = score(0u, qbase, qw, r0, 1u, kbase, kw, j0);
		barrier();
		uint lo = max(st, j0), hi = min(i, j0 + TILE - 1u);
		if (tx == 0u && rowIn && lo <= hi) {
			float m = W[ty][lo - j0];
			for (uint j = lo + 1u; j <= hi; j++) m = max(m, W[ty][j - j0]);
			float l = 0.0;
			if (rowB[ty] > 0.0) { // a previous tile had keys
				m = max(m, rowA[ty]);
				l = rowB[ty] * exp(rowA[ty] - m);
			}
			for (uint j = lo; j <= hi; j++) l += exp(W[ty][j - j0] - m);
			rowA[ty] = m;
			rowB[ty] = l;
		}
		barrier();
	}
	float m = rowA[ty], inv = 1.0 / rowB[ty];
	if (tx == 0u && rowIn) {
		stats[2u * (sbase + i)] = m;
		stats[2u * (sbase + i) + 1u] = inv;
	}
	// Pass 2: O = round(fV, P)·V over the same tiles.
	for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
		float s = score(0u, qbase, qw, r0, 1u, kbase, kw, j0);
		uint j = j0 + tx;
		bool ok = rowIn && j >= st && j <= i;
		W[ty][tx] = ok ? rnd(prob(s, m, inv), p.fV) : 0.0;
		barrier();
		accTile(acc, 2u, kbase, kw, j0);
		barrier();
	}
	if (rowIn) {
		for (uint n = 0u; n < NACC; n++) {
			uint d = tx + TILE * n;
			if (d < p.D) o[qbase + i * qw + d] = rnd(acc[n], p.fO);
		}
	}
#else // DQ
	float m = 0.0, inv = 0.0;
	if (rowIn) {
		m = stats[2u * (sbase + i)];
		inv = stats[2u * (sbase + i) + 1u];
	}
	// Pass A: rowsum = Σ_j P ⊙ dP (rowA), in key order.
	for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
		float s = score(0u, qbase, qw, r0, 1u, kbase, kw, j0);
		float dp = probGrad(qbase, qw, r0, kbase, kw, j0, true);
		uint j = j0 + tx;
		bool ok = rowIn && j >= st && j <= i;
		W[ty][tx] = ok ? prob(s, m, inv) * dp : 0.0;
		barrier();
		if (tx == 0u) {
			float sum = rowA[ty];
			for (uint x = 0u; x < TILE; x++) sum += W[ty][x];
			rowA[ty] = sum;
		}
		barrier();
	}
	float rs = rowA[ty];
	if (tx == 0u && rowIn) rowsum[sbase + i] = rs;
	if ((p.need & 1u) == 0u) return;
	// Pass B: dQ = scale·dS·K.
	for (uint j0 = c0; j0 < rEnd; j0 += TILE) {
		float s = score(0u, qbase, qw, r0, 1u, kbase, kw, j0);
		float dp = probGrad(qbase, qw, r0, kbase, kw, j0, true);
		uint j = j0 + tx;
		bool ok = rowIn && j >= st && j <= i;
		W[ty][tx] = ok ? rnd(prob(s, m, inv) * (dp - rs), p.fS) : 0.0;
		barrier();
		accTile(acc, 1u, kbase, kw, j0);
		barrier();
	}
	if (rowIn) {
		for (uint n = 0u; n < NACC; n++) {
			uint d = tx + TILE * n;
			if (d < p.D) o[qbase + i * qw + d] = rnd(p.scale * acc[n], p.fO);
		}
	}
#endif
}
#endif

#ifdef DKV
shared uint qStarts[TILE];

void main() {
	uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
	uint b = gl_WorkGroupID.z, kh = gl_WorkGroupID.y, j0 = gl_WorkGroupID.x * TILE;
	uint group = p.H / p.KVH;
	uint qw = p.H * p.D, kw = p.KVH * p.D;
	uint kbase = b * p.T * kw + kh * p.D;
	uint last = min(j0 + TILE, p.T) - 1u; // the block's last key
	// Rows before j0 see none of the block's keys, nor, with a window,
	// rows after last + window − 1.
	uint qEnd = p.window > 0u ? min(p.T, last + p.window) : p.T;
	uint j = j0 + ty; // this invocation's key row; tx indexes query rows and columns
	bool keyIn = j < p.T;
	bool needK = (p.need & 2u) != 0u, needV = (p.need & 4u) != 0u;
	for (uint h = kh * group; h < (kh + 1u) * group; h++) {
		uint qbase = b * p.T * qw + h * p.D;
		uint sbase = (b * p.H + h) * p.T;
		float accK[NACC], accV[NACC];
		for (uint n = 0u; n < NACC; n++) {
			accK[n] = 0.0;
			accV[n] = 0.0;
		}
		for (uint i0 = j0; i0 < qEnd; i0 += TILE) {
			if (ty == 0u) qStarts[tx] = i0 + tx < p.T ? rowStart(b, i0 + tx) : NONE;
			barrier();
			uint first = qStarts[0];
			for (uint x = 1u; x < TILE; x++) first = min(first, qStarts[x]);
			uint st = qStarts[tx];
			barrier();
			if (first > last) continue; // no row of the tile sees the block (uniform)
			uint i = i0 + tx;
			bool ok = keyIn && i < p.T && j >= st && j <= i;
			float m = 0.0, inv = 0.0, rs = 0.0;
			if (ok) {
				m = stats[2u * (sbase + i)];
				inv = stats[2u * (sbase + i) + 1u];
			}
			// invocation (ty, tx) holds pair (query i0+tx, key j0+ty); score
			// and probGrad hold barriers, so every invocation calls them
			float s = score(1u, kbase, kw, j0, 0u, qbase, qw, i0);
			float pr = ok ? prob(s, m, inv) : 0.0;
			if (needV) {
				W[ty][tx] = rnd(pr, p.fV);
				barrier();
				accTile(accV, 3u, qbase, qw, i0);
				barrier();
			}
			if (needK) {
				float dp = probGrad(kbase, kw, j0, qbase, qw, i0, false);
				if (ok) rs = rowsum[sbase + i];
				W[ty][tx] = ok ? rnd(pr * (dp - rs), p.fS) : 0.0;
				barrier();
				accTile(accK, 0u, qbase, qw, i0);
				barrier();
			}
		}
		if (!keyIn) continue;
		bool firstHead = h == kh * group;
		for (uint n = 0u; n < NACC; n++) {
			uint d = tx + TILE * n;
			if (d >= p.D) continue;
			uint idx = kbase + j * kw + d;
			if (needK) {
				float x = p.scale * accK[n];
				if ((p.roundHeads & 1u) != 0u) x = rnd(x, p.fK);
				dk[idx] = firstHead ? x : dk[idx] + x;
			}
			if (needV) {
				float x = accV[n];
				if ((p.roundHeads & 2u) != 0u) x = rnd(x, p.fVg);
				dv[idx] = firstHead ? x : dv[idx] + x;
			}
		}
	}
	if (!keyIn) return;
	for (uint n = 0u; n < NACC; n++) {
		uint d = tx + TILE * n;
		if (d >= p.D) continue;
		uint idx = kbase + j * kw + d;
		if (needK) dk[idx] = rnd(dk[idx], p.fK);
		if (needV) dv[idx] = rnd(dv[idx], p.fVg);
	}
}
#endif
