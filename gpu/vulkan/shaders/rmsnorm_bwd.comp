#version 450
// RMSNorm backward, the per-row part: with rstd_r = 1/sqrt(mean_j x[r,j]² +
// eps), h = g ⊙ w and c_r = (Σ_j h[r,j]·x[r,j])·rstd_r²/d,
//   dx[r, j] = rstd_r·(h[r, j] − x[r, j]·c_r)
// (nn's rmsNormOp.backward, the same expression), and rstd_r itself for the
// weight gradient (rmsnorm_bwd_dw.comp). One workgroup of 256 invocations
// per row, grid-stride over rows, as rmsnorm.comp: each invocation sums
// its strided elements' squares and h·x in fp32, then a tree over shared
// memory adds the 256 partial sums of each, in a fixed order. Each sum is
// within γ_{⌈d/256⌉+8} of its terms' absolute sum; rstd as in rmsnorm.comp.
// dx is written only when wantDX is set (its binding may alias rstd's).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufW { float w[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufG { float g[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufDX { float dx[]; };
layout(std430, set = 0, binding = 4) writeonly buffer BufR { float rstdOut[]; };

layout(push_constant) uniform Params {
	uint rows, d;
	float eps;
	uint wantDX;
} p;

shared float squares[256];
shared float dots[256];

void main() {
	uint t = gl_LocalInvocationID.x;
	for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
		uint base = r * p.d;
		precise float s = 0.0;
		precise float q = 0.0;
		for (uint j = t; j < p.d; j += 256u) {
			float v = x[base + j];
			s += v * v;
			q += (g[base + j] * w[j]) * v;
		}
		squares[t] = s;
		dots[t] = q;
		barrier();
		for (uint h = 128u; h > 0u; h >>= 1) {
			if (t < h) {
				squares[t] += squares[t + h];
				dots[t] += dots[t + h];
			}
			barrier();
		}
		float rstd = inversesqrt(squares[0] / float(p.d) + p.eps);
		precise float c = dots[0] * rstd * rstd / float(p.d);
		barrier(); // squares[0] and dots[0] are read by all before the next row overwrites them
		if (t == 0u) rstdOut[r] = rstd;
		if (p.wantDX != 0u) {
			for (uint j = t; j < p.d; j += 256u) {
				precise float v = rstd * (g[base + j] * w[j] - x[base + j] * c);
				dx[base + j] = v;
			}
		}
	}
}
