#version 450
// Dropout's keep mask, bit for bit nn's keepMask: row r of a rows×cols
// mask draws from Go's math/rand/v2 PCG seeded with (key, id·2^32 +
// uint32(r + rowOffset)): a 128-bit LCG, state = state·MUL + INC, whose
// (j+1)-th output (DXSM of the new state) decides column j: kept when
// its top 53 bits are at least thr = ⌈p·2^53⌉. Bit b of word w of row r
// (mask[r·words + w]) is column 32w + b. One invocation per word jumps
// the LCG 32w steps ahead (Brown's O(log) composition of the affine map)
// and draws its 32 columns. 128-bit and 64-bit values are uint limbs,
// least significant first, so no device needs shaderInt64.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) writeonly buffer BufMask { uint mask[]; };

layout(push_constant) uniform Params {
	uint rows, cols, words;
	uint keyLo, keyHi; // the pass's noise key
	uint id;           // the op's noise id (its low 32 bits: the seed shifts it by 32)
	uint rowOffset;
	uint thrLo, thrHi; // ⌈p·2^53⌉
} p;

const uvec4 MUL = uvec4(0x9fccf645u, 0x4385df64u, 0x1fc65da4u, 0x2360ed05u);
const uvec4 INC = uvec4(0xf767814fu, 0x14057b7eu, 0x4c957f2du, 0x5851f42du);

// mul128 is a·b mod 2^128.
uvec4 mul128(uvec4 a, uvec4 b) {
	uvec4 r = uvec4(0u);
	for (int i = 0; i < 4; i++) {
		uint carry = 0u;
		for (int j = 0; i + j < 4; j++) {
			uint hi, lo, c1, c2;
			umulExtended(a[i], b[j], hi, lo);
			lo = uaddCarry(lo, carry, c1);
			r[i + j] = uaddCarry(r[i + j], lo, c2);
			carry = hi + c1 + c2; // a·b + two words < 2^64: no overflow
		}
	}
	return r;
}

uvec4 add128(uvec4 a, uvec4 b) {
	uvec4 r;
	uint c = 0u, c1, c2;
	for (int i = 0; i < 4; i++) {
		r[i] = uaddCarry(a[i], b[i], c1);
		r[i] = uaddCarry(r[i], c, c2);
		c = c1 + c2;
	}
	return r;
}

// mul64 is a·b mod 2^64 for 64-bit values as (lo, hi).
uvec2 mul64(uvec2 a, uvec2 b) {
	uint hi, lo;
	umulExtended(a.x, b.x, hi, lo);
	return uvec2(lo, hi + a.x * b.y + a.y * b.x);
}

void main() {
	uint total = p.rows * p.words;
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint t = gl_GlobalInvocationID.x; t < total; t += stride) {
		uint r = t / p.words, w = t - r * p.words;
		uvec4 state = uvec4(r + p.rowOffset, p.id, p.keyLo, p.keyHi);
		// state·A + C is the LCG 32w steps on
		uvec4 A = uvec4(1u, 0u, 0u, 0u), C = uvec4(0u);
		uvec4 m = MUL, c = INC;
		for (uint k = 32u * w; k != 0u; k >>= 1) {
			if ((k & 1u) != 0u) {
				A = mul128(A, m);
				C = add128(mul128(C, m), c);
			}
			c = mul128(add128(m, uvec4(1u, 0u, 0u, 0u)), c);
			m = mul128(m, m);
		}
		state = add128(mul128(state, A), C);
		uint bits = 0u;
		uint end = min(32u, p.cols - 32u * w);
		for (uint b = 0u; b < end; b++) {
			state = add128(mul128(state, MUL), INC);
			// DXSM: hi ^= hi>>32; hi *= cheapMul; hi ^= hi>>48; hi *= lo|1
			uvec2 h = state.zw;
			h.x ^= h.y;
			h = mul64(h, uvec2(0xe4dd58b5u, 0xda942042u));
			h.x ^= h.y >> 16;
			h = mul64(h, uvec2(state.x | 1u, state.y));
			// the top 53 bits, as (high 21, low 32)
			uint mHi = h.y >> 11, mLo = (h.y << 21) | (h.x >> 11);
			if (mHi > p.thrHi || (mHi == p.thrHi && mLo >= p.thrLo)) bits |= 1u << b;
		}
		mask[t] = bits;
	}
}
