#version 450
#extension GL_GOOGLE_include_directive : require
// DoRA's magnitude gradient (nn.DoRA's backward):
//   dm[j] = rnd(Σ_i gy[i,j]·(x[i,j] + s·lora[i,j]) / norm[j])
// over rows i of [rows, cols] tensors, x being base (baseD with dropout).
// One invocation per column sums its rows in order with a compensated
// (Kahan) sum: deterministic, no atomics, and within a few fp32 ulps of
// the CPU's float64 sum. Grid-stride over columns.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufGy { float gy[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufLora { float lora[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufNorm { float norm[]; };
layout(std430, set = 0, binding = 4) writeonly buffer BufDm { float dm[]; };

layout(push_constant) uniform Params {
	uint rows;
	uint cols;
	uint fmt; // dm's rounding: 0 none, 1 bf16, 2 fp16
	float s;
} p;

#include "half.glsl"

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint j = gl_GlobalInvocationID.x; j < p.cols; j += stride) {
		precise float sum = 0.0, comp = 0.0;
		for (uint i = 0u; i < p.rows; i++) {
			uint e = i * p.cols + j;
			precise float y = gy[e] * (x[e] + p.s * lora[e]) - comp;
			precise float t = sum + y;
			comp = (t - sum) - y;
			sum = t;
		}
		precise float d = sum / norm[j];
		dm[j] = rnd(d, p.fmt);
	}
}
