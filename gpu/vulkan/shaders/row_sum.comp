#version 450
// out[r] = scale · Σ_j x[r·cols + j] for each of rows rows of cols values:
// one workgroup of 256 invocations per row (grid-stride over rows). Each
// invocation sums its strided elements in order, then a tree of 8 levels
// over shared memory adds the 256 partial sums, so the order of the
// additions depends on cols alone, never on scheduling, and the fp32 sum
// is within γ_{⌈cols/256⌉+8}·Σ|x| of the exact one (then one rounding for
// the scale). A sequence's summed log-probability is minus the row sum of
// its tokens' cross-entropies.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { float outv[]; };

layout(push_constant) uniform Params {
	uint rows, cols;
	float scale;
} p;

shared float red[256];

void main() {
	uint t = gl_LocalInvocationID.x;
	for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
		float s = 0.0;
		for (uint j = t; j < p.cols; j += 256u) s += x[r * p.cols + j];
		red[t] = s;
		barrier();
		for (uint h = 128u; h > 0u; h >>= 1) {
			if (t < h) red[t] += red[t + h];
			barrier();
		}
		if (t == 0u) outv[r] = p.scale * red[0];
		barrier(); // red[0] read before the next row's partial sums
	}
}
