#version 450
// RMSNorm backward, the weight gradient dw[j] = Σ_r g[r, j]·x[r, j]·rstd_r
// over rows of length d, in a fixed order whatever the device (no atomics):
//   mode 0: part[c, j] = the sum over chunk c's rows (chunkRows consecutive
//           rows, in order), one invocation per (c, j);
//   mode 1: dw[j] = part[0, j] + part[1, j] + … in chunk order, one
//           invocation per column.
// Each dw[j] is thus a sum of rows terms in a fixed order, sequential sums of
// depth chunkRows + chunks − 1: within γ_{chunkRows+chunks−1} of its terms'
// absolute sum (plus 2u per term for its two products).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufG { float g[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufR { float rstd[]; };
layout(std430, set = 0, binding = 3) buffer BufPart { float part[]; };
layout(std430, set = 0, binding = 4) writeonly buffer BufDW { float dw[]; };

layout(push_constant) uniform Params {
	uint rows, d, chunkRows, chunks, mode;
} p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	if (p.mode == 0u) {
		for (uint i = gl_GlobalInvocationID.x; i < p.chunks * p.d; i += stride) {
			uint c = i / p.d, j = i % p.d;
			uint end = min((c + 1u) * p.chunkRows, p.rows);
			precise float s = 0.0;
			for (uint r = c * p.chunkRows; r < end; r++) {
				s += g[r * p.d + j] * x[r * p.d + j] * rstd[r];
			}
			part[i] = s;
		}
		return;
	}
	for (uint j = gl_GlobalInvocationID.x; j < p.d; j += stride) {
		precise float s = part[j];
		for (uint c = 1u; c < p.chunks; c++) {
			s += part[c * p.d + j];
		}
		dw[j] = s;
	}
}
