#version 450
// Grouped-query attention's dK and dV from each query head's share
// (attention.comp -DDKV writes them, rounded to the gradient's format
// when roundHeads says so): per element of the [B·T, KVH·D] gradient,
// the shares of its group's heads added in head order in fp32 from the
// first, then rounded to the gradient's format. The operations and
// order of the CPU's repeat_kv backward, and the same on any dispatch.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufPart { float part[]; }; // [2][B·T, H·D]: dK's shares, dV's
layout(std430, set = 0, binding = 1) writeonly buffer BufDK { float dk[]; };   // [B·T, KVH·D]
layout(std430, set = 0, binding = 2) writeonly buffer BufDV { float dv[]; };

layout(push_constant) uniform Params {
	uint rows, H, KVH, D; // rows = B·T
	uint fK, fVg;         // formats of dK and dV: 0 fp32, 1 bf16, 2 fp16
	uint need;            // bit 1 dK, bit 2 dV (attention.comp's)
} p;

// The rounding of attention.comp, elementwise.comp's: bit for bit
// amp.BF16.Round and amp.FP16.Round.
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

void main() {
	uint kw = p.KVH * p.D, qw = p.H * p.D, group = p.H / p.KVH;
	uint n = p.rows * kw, shares = p.rows * qw;
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint e = gl_GlobalInvocationID.x; e < n; e += stride) {
		uint row = e / kw, c = e % kw; // c = kh·D + d
		uint kh = c / p.D, d = c % p.D;
		uint at = row * qw + kh * group * p.D + d; // head kh·group's share
		if ((p.need & 2u) != 0u) {
			precise float s = part[at];
			for (uint h = 1u; h < group; h++) s += part[at + h * p.D];
			dk[e] = rnd(s, p.fK);
		}
		if ((p.need & 4u) != 0u) {
			precise float s = part[shares + at];
			for (uint h = 1u; h < group; h++) s += part[shares + at + h * p.D];
			dv[e] = rnd(s, p.fVg);
		}
	}
}
