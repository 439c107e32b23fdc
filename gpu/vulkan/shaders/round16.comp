#version 450
// Exact fp32 → 16-bit rounding, round to nearest even, in integer code so
// every driver gives the same bits (hardware conversions differ in NaN
// payloads and, on some, flush subnormals):
//   mode 0, bf16: mixtune's amp.BF16.Bits16: the top 16 bits after adding
//     0x7fff plus the lowest kept bit; a NaN keeps its sign and top
//     payload bits, quieted (| 0x0040).
//   mode 1, fp16: amp.FP16.Bits16 (x448/float16's Fromfloat32): overflow
//     to ±Inf, subnormals rounded to nearest even, Inf kept, a NaN becomes
//     sign|0x7c00|0x0200|payload>>13.
// x holds n fp32 values as bits; y receives them as 16-bit values, two to
// a word, element i in the low half of word i/2 when i is even (a last
// odd element's high half is 0). Grid-stride over words. xOff (values)
// and yOff (words) place both in larger buffers: Gemm narrows an
// operand's span this way before a tensor-core product that reads 16-bit
// operands only (GemmVariant.A16).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { uint x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufY { uint y[]; };

layout(push_constant) uniform Params {
	uint n;
	uint mode;
	uint xOff; // first value of x
	uint yOff; // first word of y
} p;

uint toBF16(uint u) {
	if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;
	return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

uint toFP16(uint u) {
	uint sign = (u >> 16) & 0x8000u;
	uint e = (u >> 23) & 0xffu;
	uint coef = u & 0x007fffffu;
	if (e == 0xffu) {
		uint nanBit = coef != 0u ? 0x0200u : 0u;
		return sign | 0x7c00u | nanBit | (coef >> 13);
	}
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
	uint roundBit = 0x00001000u;
	if ((coef & roundBit) != 0u && (coef & (3u * roundBit - 1u)) != 0u) h++;
	return h;
}

uint round16(uint u) { return p.mode == 1u ? toFP16(u) : toBF16(u); }

void main() {
	uint words = (p.n + 1u) / 2u;
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint w = gl_GlobalInvocationID.x; w < words; w += stride) {
		uint i = 2u * w;
		uint lo = round16(x[p.xOff + i]);
		uint hi = i + 1u < p.n ? round16(x[p.xOff + i + 1u]) : 0u;
		y[p.yOff + w] = (lo & 0xffffu) | (hi << 16);
	}
}
