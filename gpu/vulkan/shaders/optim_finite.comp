#version 450
// Counts the NaN and ±Inf values among n fp32 values into count[at]
// (an integer atomic add: the total is the same in any order). With
// reset set, one invocation only zeroes count[at] (a dispatch of its
// own, ordered before the counting one by the recorder's barrier).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { uint x[]; };
layout(std430, set = 0, binding = 1) buffer BufC { uint count[]; };

layout(push_constant) uniform Params {
	uint n;
	uint at;
	uint reset;
} p;

shared uint found;

void main() {
	if (p.reset != 0u) {
		if (gl_GlobalInvocationID.x == 0u) count[p.at] = 0u;
		return;
	}
	uint t = gl_LocalInvocationID.x;
	if (t == 0u) found = 0u;
	barrier();
	uint c = 0u;
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		// exponent all ones: Inf or NaN (bit test, immune to fast-math)
		if ((x[i] & 0x7f800000u) == 0x7f800000u) c++;
	}
	if (c > 0u) atomicAdd(found, c);
	barrier();
	if (t == 0u && found > 0u) atomicAdd(count[p.at], found);
}
