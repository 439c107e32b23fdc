#version 450
#extension GL_GOOGLE_include_directive : require
// DoRA's row norms: norm[o] = max(‖W[o] + s·B[o]·A‖₂, floor) for W [rows,
// cols], A [r, cols], B [rows, r] (nn.DoRANorm). W is fp32, or 16-bit
// values (wfmt 1 bf16, 2 fp16) packed two to a word.
//
// One workgroup per row (grid-stride over rows): invocation t takes the
// columns j ≡ t (mod 256), forms v = W[o,j] + Σ_k (s·B[o,k])·A[k,j] in k
// order and adds v² into a compensated (Kahan) sum; the 256 partial sums
// are then added in a fixed tree. The order is fixed, so the result is
// deterministic; it is fp32 throughout, where the CPU sums in float64 and
// rounds once (see the bound in gpu/vkengine/lower_dora.go).
// `precise` keeps the compiler from contracting or reassociating it.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufW { uint w[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufA { float a[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufB { float b[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufNorm { float norm[]; };

layout(push_constant) uniform Params {
	uint rows;
	uint cols;
	uint r;
	uint wfmt; // 0 fp32, 1 bf16, 2 fp16
	float s;
	float floorNorm;
} p;

#include "half.glsl"

shared float part[256];

float loadW(uint e) {
	if (p.wfmt == 0u) return uintBitsToFloat(w[e]);
	return widen16(half16(w, e), p.wfmt);
}

void main() {
	uint t = gl_LocalInvocationID.x;
	for (uint o = gl_WorkGroupID.x; o < p.rows; o += gl_NumWorkGroups.x) {
		precise float sum = 0.0, comp = 0.0;
		for (uint j = t; j < p.cols; j += 256u) {
			precise float v = loadW(o * p.cols + j);
			for (uint k = 0u; k < p.r; k++) {
				precise float c = p.s * b[o * p.r + k];
				if (c != 0.0) v = v + c * a[k * p.cols + j];
			}
			precise float y = v * v - comp;
			precise float s2 = sum + y;
			comp = (s2 - sum) - y;
			sum = s2;
		}
		part[t] = sum;
		barrier();
		for (uint off = 128u; off > 0u; off >>= 1) {
			if (t < off) part[t] = part[t] + part[t + off];
			barrier();
		}
		if (t == 0u) norm[o] = max(sqrt(part[0]), p.floorNorm);
		barrier(); // part is refilled for the next row
	}
}
