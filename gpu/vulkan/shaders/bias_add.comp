#version 450
// Bias forward: y[r, j] = x[r, j] + b[j] over rows×d values (packed rows),
// grid-stride. One rounded sum: bit for bit the CPU's.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufY { float y[]; };

layout(push_constant) uniform Params { uint n, d; } p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		precise float v = x[i] + b[i % p.d];
		y[i] = v;
	}
}
