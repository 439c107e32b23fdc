#version 450
#extension GL_GOOGLE_include_directive : require
// DoRA's elementwise gradients (nn.DoRA's backward), over gy [n/cols, cols]
// with g = m / norm per column, each rounded to its input's format:
//   dbase  = g·gy (without dropout) or gy     (want bit 1, format fb)
//   dbaseD = (g − 1)·gy                        (want bit 2, format fd)
//   dlora  = (g·s)·gy                          (want bit 4, format fl)
// in the CPU's fp32 order of operations. A gradient not wanted is not
// written (its binding may be any buffer). Grid-stride.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufGy { float gy[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufM { float m[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufNorm { float norm[]; };
layout(std430, set = 0, binding = 3) buffer BufDBase { float dbase[]; };
layout(std430, set = 0, binding = 4) buffer BufDBaseD { float dbaseD[]; };
layout(std430, set = 0, binding = 5) buffer BufDLora { float dlora[]; };

layout(push_constant) uniform Params {
	uint n;
	uint cols;
	uint dropout;
	uint want;
	uint fb, fd, fl;
	float s;
} p;

#include "half.glsl"

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		uint j = i % p.cols;
		precise float g = m[j] / norm[j];
		float v = gy[i];
		if ((p.want & 1u) != 0u) {
			precise float d = p.dropout != 0u ? v : g * v;
			dbase[i] = rnd(d, p.fb);
		}
		if ((p.want & 2u) != 0u) {
			precise float d = (g - 1.0) * v;
			dbaseD[i] = rnd(d, p.fd);
		}
		if ((p.want & 4u) != 0u) {
			precise float d = (g * p.s) * v;
			dlora[i] = rnd(d, p.fl);
		}
	}
}
