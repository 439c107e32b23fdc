#version 450
// Bias gradient: db[j] = Σ_r g[r, j] over rows of length d, one
// invocation per column (grid-stride), in nn's order: each block of chunk
// rows summed from zero in row order, then the blocks' sums added in
// block order. The same fp32 additions in the same order as the CPU's
// biasGradOp, so the same bits, and no dependence on the dispatch.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufG { float g[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufDB { float db[]; };

layout(push_constant) uniform Params { uint rows, d, chunk; } p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint j = gl_GlobalInvocationID.x; j < p.d; j += stride) {
		precise float total = 0.0;
		for (uint r0 = 0u; r0 < p.rows; r0 += p.chunk) {
			precise float part = 0.0;
			uint r1 = min(r0 + p.chunk, p.rows);
			for (uint r = r0; r < r1; r++) part += g[r * p.d + j];
			total = r0 == 0u ? part : total + part;
		}
		db[j] = total;
	}
}
