#version 450
// Embedding backward: dt[v, j] = Σ g[r, j] over the rows r with ids[r] = v,
// in position order starting from +0 (rows never looked up are 0), as nn's
// embedding backward adds them: the same fp32 sums, bit for bit, at every
// run and on every device, with no atomics. Three passes:
//   mode 0: head[v] = −1 for every table row v (one invocation per row);
//   mode 1: per position r (one invocation each): next[r] = the next
//           position with the same id (−1 if none) and, when r is the
//           first position of its id, head[id] = r (one writer per id);
//   mode 2: per table value (v, j): walk head[v], next[…] in position
//           order, summing g[·, j], and write dt[v, j].
// Mode 1 scans the ids: O(n²) comparisons in all, over n ≤ a few thousand
// tokens a micro-batch, small beside the O(v·d) of mode 2. Ids outside
// [0, v) are skipped (the host rejects them before recording).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufIDs { int ids[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufG { float g[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufDT { float dt[]; };
layout(std430, set = 0, binding = 3) buffer BufHead { int head[]; };
layout(std430, set = 0, binding = 4) buffer BufNext { int next[]; };

layout(push_constant) uniform Params {
	uint n, d, v, mode;
} p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	if (p.mode == 0u) {
		for (uint t = gl_GlobalInvocationID.x; t < p.v; t += stride) head[t] = -1;
		return;
	}
	if (p.mode == 1u) {
		for (uint r = gl_GlobalInvocationID.x; r < p.n; r += stride) {
			int id = ids[r];
			if (id < 0 || uint(id) >= p.v) continue;
			int nx = -1;
			for (uint q = r + 1u; q < p.n; q++) {
				if (ids[q] == id) {
					nx = int(q);
					break;
				}
			}
			next[r] = nx;
			bool first = true;
			for (uint q = 0u; q < r; q++) {
				if (ids[q] == id) {
					first = false;
					break;
				}
			}
			if (first) head[id] = int(r);
		}
		return;
	}
	for (uint i = gl_GlobalInvocationID.x; i < p.v * p.d; i += stride) {
		uint t = i / p.d, j = i % p.d;
		precise float s = 0.0;
		for (int r = head[t]; r >= 0; r = next[r]) {
			s += g[uint(r) * p.d + j];
		}
		dt[i] = s;
	}
}
