#version 450
// DoRA's forward pass (nn.DoRA), elementwise over y [n/cols, cols] with
// g = m / norm per column:
//   without dropout: y = g·(base + s·lora)
//   with dropout:    y = base + (g − 1)·baseD + g·(s·lora)
// in the CPU's fp32 order of operations (`precise`: no contraction).
// Without dropout baseD is bound to base and not read. Grid-stride.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufBase { float base[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufBaseD { float baseD[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufLora { float lora[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufM { float m[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufNorm { float norm[]; };
layout(std430, set = 0, binding = 5) writeonly buffer BufY { float y[]; };

layout(push_constant) uniform Params {
	uint n;
	uint cols;
	uint dropout;
	float s;
} p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		uint j = i % p.cols;
		precise float g = m[j] / norm[j];
		precise float sl = p.s * lora[i];
		if (p.dropout == 0u) {
			y[i] = g * (base[i] + sl);
		} else {
			precise float v = base[i] + (g - 1.0) * baseD[i];
			y[i] = v + g * sl;
		}
	}
}
