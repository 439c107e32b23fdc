#version 450
// Dropout through a keep mask (dropout_mask.comp's layout): over n values
// of rows of cols, y = x·scale where the mask keeps the value, else 0.
// The forward pass applies it to x, the backward pass to the output's
// gradient, with the same mask. One rounded product: bit for bit the CPU's.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufMask { uint mask[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufY { float y[]; };

layout(push_constant) uniform Params {
	uint n, cols, words;
	float scale;
} p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		uint r = i / p.cols, c = i - r * p.cols;
		bool keep = ((mask[r * p.words + (c >> 5)] >> (c & 31u)) & 1u) != 0u;
		precise float v = x[i] * p.scale;
		y[i] = keep ? v : 0.0;
	}
}
