#version 450
// Elementwise kernels over n fp32 values, grid-stride:
//   mode 0: z = rnd(x + rs(s·y))   (a residual, an adapter branch, a gradient sum)
//   mode 1: z = rnd(s·x)           (a copy when s = 1, a scaled gradient)
//   mode 2: z = rnd(x)             (rounding in place when z is x)
// rnd rounds to the 16-bit format fmt names (0: none, 1: bf16, 2: fp16),
// keeping the value in fp32; rs is rnd when roundScaled is set and s ≠ 1
// (PEFT rounds the scaled bf16 product before the sum). The roundings are
// round16.comp's integer code, so they are bit for bit amp.BF16.Round and
// amp.FP16.Round. x, y and z may be the same buffer.
//
// Built a second time with -DCOUNT for a gradient's rounding: it also
// counts the values the rounding sends to zero from nonzero (bit
// patterns, so no driver's flushing of subnormals decides it: amp's
// Format.Underflows), adding each workgroup's count to the 64-bit count
// in count[0] (low word) and count[1] (high word).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) buffer BufY { float y[]; };
layout(std430, set = 0, binding = 2) buffer BufZ { float z[]; };
#ifdef COUNT
layout(std430, set = 0, binding = 3) buffer BufCount { uint count[]; };
shared uint red[256];
#endif

layout(push_constant) uniform Params {
	uint n;
	uint mode;
	uint fmt;
	uint roundScaled;
	float s;
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

// fromFP16 widens fp16 bits exactly.
float fromFP16(uint h) {
	uint sign = (h & 0x8000u) << 16;
	uint e = (h >> 10) & 0x1fu;
	uint m = h & 0x3ffu;
	if (e == 0x1fu) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));
	if (e == 0u) {
		float v = float(m) * (1.0 / 16777216.0); // m · 2^-24, exact
		return sign != 0u ? -v : v;
	}
	return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}

float rnd(float v, uint f) {
	if (f == 1u) return uintBitsToFloat(toBF16(floatBitsToUint(v)) << 16);
	if (f == 2u) {
		uint u = floatBitsToUint(v);
		// a NaN keeps its fp32 payload, quieted, as amp.FP16.Round keeps it
		if ((u & 0x7fffffffu) > 0x7f800000u) return uintBitsToFloat(u | 0x00400000u);
		return fromFP16(toFP16(u));
	}
	return v;
}

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
#ifdef COUNT
	uint under = 0u;
#endif
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		precise float v;
		if (p.mode == 0u) {
			precise float t = p.s == 1.0 ? y[i] : p.s * y[i];
			if (p.roundScaled != 0u && p.s != 1.0) t = rnd(t, p.fmt);
			v = x[i] + t;
		} else if (p.mode == 1u) {
			v = p.s == 1.0 ? x[i] : p.s * x[i];
		} else {
			v = x[i];
		}
#ifdef COUNT
		float r = rnd(v, p.fmt);
		if ((floatBitsToUint(v) & 0x7fffffffu) != 0u && (floatBitsToUint(r) & 0x7fffffffu) == 0u) under++;
		z[i] = r;
#else
		z[i] = rnd(v, p.fmt);
#endif
	}
#ifdef COUNT
	uint t = gl_LocalInvocationID.x;
	red[t] = under;
	barrier();
	for (uint h = 128u; h > 0u; h >>= 1) {
		if (t < h) red[t] += red[t + h];
		barrier();
	}
	if (t == 0u && red[0] > 0u) {
		uint old = atomicAdd(count[0], red[0]);
		if (old + red[0] < old) atomicAdd(count[1], 1u); // the carry into the high word
	}
#endif
}
