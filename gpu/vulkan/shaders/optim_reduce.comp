#version 450
// A deterministic sum of n fp32 values (or of their squares), in two
// passes of one shader:
//   pass 0: workgroup g of G sums values [g·L, min((g+1)·L, n)):
//           invocation i its elements g·L + i + 256k in order, then a
//           tree of 8 levels over shared memory; partial[g] = the sum.
//   pass 1: one workgroup sums partial[0..G) the same way and writes
//           out[at] = sum·scale.
// G and L depend on n alone (Kernels.reduceShape), never on the device,
// so the order of the additions, and the result's bits, are fixed for
// a given n on a given device. Every value passes through at most
// ⌈L/256⌉ + 8 + ⌈G/256⌉ + 8 additions, so the fp32 sum is within
// γ_k·Σ|terms| of the exact one, k = ⌈L/256⌉ + ⌈G/256⌉ + 16 (+1 for a
// square's rounding, +1 for the scale).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) buffer BufP { float partial[]; };
layout(std430, set = 0, binding = 2) buffer BufO { float outv[]; };

layout(push_constant) uniform Params {
	uint n;
	uint pass;
	uint square;
	uint groups; // G
	uint span;   // L
	uint at;
	float scale;
} p;

shared float red[256];

void main() {
	uint t = gl_LocalInvocationID.x;
	precise float s = 0.0;
	if (p.pass == 0u) {
		uint lo = gl_WorkGroupID.x * p.span;
		uint hi = min(lo + p.span, p.n);
		for (uint i = lo + t; i < hi; i += 256u) {
			precise float v = x[i];
			if (p.square != 0u) v = v * v;
			s += v;
		}
	} else {
		for (uint i = t; i < p.groups; i += 256u) s += partial[i];
	}
	red[t] = s;
	barrier();
	for (uint h = 128u; h > 0u; h >>= 1) {
		if (t < h) red[t] = red[t] + red[t + h];
		barrier();
	}
	if (t == 0u) {
		if (p.pass == 0u) {
			partial[gl_WorkGroupID.x] = red[0];
		} else {
			precise float r = red[0] * p.scale;
			outv[p.at] = r;
		}
	}
}
