#version 450
// RMSNorm forward: y[r, j] = w[j]·(x[r, j]·rstd_r), rstd_r =
// 1/sqrt(mean_j x[r, j]² + eps), for rows of length d (row-major, packed).
// One workgroup of 256 invocations per row (grid-stride over rows): each
// sums the squares of its strided elements in fp32, then a tree over
// shared memory adds the 256 partial sums (8 levels). The relative error
// of rstd is at most ½γ_{⌈d/256⌉+10} + 4u (inversesqrt is within 2 ulp);
// the CPU kernel (nn.RMSNormRows) accumulates in float64 instead.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufW { float w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufY { float y[]; };

layout(push_constant) uniform Params {
	uint rows, d;
	float eps;
} p;

shared float part[256];

void main() {
	uint t = gl_LocalInvocationID.x;
	for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
		uint base = r * p.d;
		float s = 0.0;
		for (uint j = t; j < p.d; j += 256u) {
			float v = x[base + j];
			s += v * v;
		}
		part[t] = s;
		barrier();
		for (uint h = 128u; h > 0u; h >>= 1) {
			if (t < h) part[t] += part[t + h];
			barrier();
		}
		float rstd = inversesqrt(part[0] / float(p.d) + p.eps);
		barrier(); // part[0] is read by all before the next row overwrites it
		for (uint j = t; j < p.d; j += 256u) {
			precise float v = x[base + j] * rstd;
			y[base + j] = w[j] * v;
		}
	}
}
