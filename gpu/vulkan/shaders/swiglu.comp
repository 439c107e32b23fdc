#version 450
// SwiGLU, nn.SwiGLU's kernels over n fp32 values, grid-stride:
//   forward:            y = (a·σ(a))·u
//   backward (-DBACKWARD): da = ((g·u)·σ(a))·(1 + a·(1 − σ(a))), du = (g·a)·σ(a)
// in the CPU's order of operations, with `precise` so that no compiler
// fuses them into other roundings. σ(x) = 1/(1 + e^−x) for x ≥ 0 and
// e^x/(1 + e^x) below, with e^x from the CPU's own expf (nn/mathf.go:
// Cephes' degree-6 polynomial, within 2 ulp); only the division differs
// from the CPU's, which Vulkan allows to be 2.5 ulp off, so σ here is
// within 12u of exact (u = 2^-24) where the CPU's is within 8u. The
// roundings to 16-bit formats are separate dispatches (Kernels.Round).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufU { float u[]; };
#ifdef BACKWARD
layout(std430, set = 0, binding = 2) readonly buffer BufG { float g[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufDA { float da[]; };
layout(std430, set = 0, binding = 4) writeonly buffer BufDU { float du[]; };

layout(push_constant) uniform Params {
	uint n;
	uint needDA, needDU; // which gradients to write (the other binding may alias)
} p;
#else
layout(std430, set = 0, binding = 2) writeonly buffer BufY { float y[]; };

layout(push_constant) uniform Params { uint n; } p;
#endif

// expf is nn's expf operation for operation: x = n·ln2 + r, e^r by the
// polynomial, 2^n into the exponent bits (two steps below 2^-126).
float expf(float x) {
	if (isnan(x)) return x;
	if (x > 88.72283905206835) return uintBitsToFloat(0x7f800000u);
	if (x < -103.972077083991796) return 0.0;
	precise float t = x * 1.44269504088896341 + 0.5;
	precise float n = floor(t);
	precise float r = x - n * 0.693359375 - n * -2.12194440e-4;
	precise float q = 1.9875691500e-4;
	q = q * r + 1.3981999507e-3;
	q = q * r + 8.3334519073e-3;
	q = q * r + 4.1665795894e-2;
	q = q * r + 1.6666665459e-1;
	q = q * r + 5.0000001201e-1;
	precise float e = q * r * r + r + 1.0;
	int ni = int(n);
	precise float y; // precise: the caller's 1 + e^x must not fuse with this product
	if (ni < -126) y = e * uintBitsToFloat(uint(ni + 126 + 127) << 23) * uintBitsToFloat(1u << 23);
	else if (ni > 127) y = e * 2.0 * uintBitsToFloat(uint(ni - 1 + 127) << 23);
	else y = e * uintBitsToFloat(uint(ni + 127) << 23);
	return y;
}

float sigmoid(float x) {
	if (x >= 0.0) {
		precise float d = 1.0 + expf(-x);
		return 1.0 / d;
	}
	precise float e = expf(x);
	precise float d = 1.0 + e;
	return e / d;
}

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		float x = a[i];
		float s = sigmoid(x);
#ifdef BACKWARD
		if (p.needDA != 0u) {
			precise float v = g[i] * u[i] * s * (1.0 + x * (1.0 - s));
			da[i] = v;
		}
		if (p.needDU != 0u) {
			precise float v = g[i] * x * s;
			du[i] = v;
		}
#else
		precise float v = x * s * u[i];
		y[i] = v;
#endif
	}
}
