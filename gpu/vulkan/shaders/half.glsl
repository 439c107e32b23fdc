// 16-bit formats in integer code, shared by the shaders that include it
// (#extension GL_GOOGLE_include_directive): exact widening of bf16 and
// fp16 bits, and round-to-nearest-even narrowing bit for bit as
// amp.BF16.Round and amp.FP16.Round (elementwise.comp's roundings). Integer
// code gives every driver the same bits: hardware conversions differ in
// NaN payloads and, on some, flush subnormals.
// Formats are numbered as vulkan.Rounding: 0 none (fp32), 1 bf16, 2 fp16.

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

// fromFP16 widens fp16 bits exactly, as amp.FP16.FromBits16: a NaN keeps
// its sign and payload and is quieted.
float fromFP16(uint h) {
	uint sign = (h & 0x8000u) << 16;
	uint e = (h >> 10) & 0x1fu;
	uint m = h & 0x3ffu;
	if (e == 0x1fu) return uintBitsToFloat(sign | (m != 0u ? 0x7fc00000u : 0x7f800000u) | (m << 13));
	if (e == 0u) {
		float v = float(m) * (1.0 / 16777216.0); // m · 2^-24, exact
		return sign != 0u ? -v : v;
	}
	return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

// widen16 is the fp32 value of 16-bit bits h of format f (1 bf16, 2 fp16).
float widen16(uint h, uint f) {
	return f == 2u ? fromFP16(h) : uintBitsToFloat(h << 16);
}

// half16 is element e of 16-bit values packed two to a word, element e in
// the low half of word e/2 when e is even (Buffer.WriteUint16's layout).
#define half16(words, e) (((words)[(e) >> 1] >> (((e) & 1u) * 16u)) & 0xffffu)

// rnd rounds v to format f, keeping it in fp32.
float rnd(float v, uint f) {
	if (f == 1u) return uintBitsToFloat(toBF16(floatBitsToUint(v)) << 16);
	if (f == 2u) return fromFP16(toFP16(floatBitsToUint(v)));
	return v;
}
