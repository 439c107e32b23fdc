#version 450
// Split-K's second pass: C = alpha·Σ_z part[z] + beta·C over the M×N
// elements of C, where part[z] is chunk z's raw product (gemm.comp built
// with -DSPLITK: element (m, n) of chunk z at (z·M + m)·N + n). The chunks
// are added in order 0, 1, …, S−1, each element by one invocation, so the
// result does not depend on the dispatch; the epilogue is gemm.comp's
// (alpha·sum, then fma with beta·C; with beta == 0 C is not read).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufP { float part[]; };
layout(std430, set = 0, binding = 1) buffer BufC { float c[]; };

layout(push_constant) uniform Params {
	uint M, N, S; // C's size and the number of chunks
	uint ldc, cOff;
	float alpha, beta;
} p;

void main() {
	uint mn = p.M * p.N;
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint e = gl_GlobalInvocationID.x; e < mn; e += stride) {
		precise float s = part[e];
		for (uint z = 1u; z < p.S; z++) s += part[z * mn + e];
		uint m = e / p.N, n = e - m * p.N;
		uint ci = p.cOff + m * p.ldc + n;
		float v = p.alpha * s;
		if (p.beta != 0.0) v = fma(p.beta, c[ci], v);
		c[ci] = v;
	}
}
