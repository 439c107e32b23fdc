#version 450
#extension GL_GOOGLE_include_directive : require
// y = rnd(widen(bits)) over n 16-bit values packed two to a word: a frozen
// 16-bit weight as fp32 for a matmul that computes in another 16-bit
// format (fp16 weights in a bf16 matmul, or the reverse), exactly as
// nn's weights16 widens a block and rounds it to the compute format.
// Grid-stride.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufBits { uint bits[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufY { float y[]; };

layout(push_constant) uniform Params {
	uint n;
	uint src; // the bits' format: 1 bf16, 2 fp16
	uint dst; // the rounding: 0 none, 1 bf16, 2 fp16
} p;

#include "half.glsl"

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		y[i] = rnd(widen16(half16(bits, i), p.src), p.dst);
	}
}
