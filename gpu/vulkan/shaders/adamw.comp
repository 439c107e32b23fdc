#version 450
// One AdamW step (torch.optim.AdamW, amsgrad off) over n fp32 parameters,
// the operations in the order and with the fusions of mixtune's
// optim.AdamW.update:
//   x  = x·decay                      (when decay is applied)
//   m  = fma(g, a1, m·b1)
//   v  = fma(a2·g, g, v·b2)
//   x += (negStep·m) / (sqrt(v)/bc2Sqrt + eps)
// The scalars come from the host, computed in float64 and rounded to
// float32 as optim does. "precise" keeps the compiler from contracting
// the other multiply-adds; Vulkan lets fma, sqrt and division be a few
// ulps from correctly rounded, so results match the CPU to a few ulps,
// not bit for bit (see TestAdamW).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufG { float g[]; };
layout(std430, set = 0, binding = 2) buffer BufM { float m[]; };
layout(std430, set = 0, binding = 3) buffer BufV { float v[]; };

layout(push_constant) uniform Params {
	uint n;
	uint applyDecay;
	float decay, b1, a1, b2, a2, negStep, bc2Sqrt, eps;
} p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		precise float xi = x[i];
		precise float gi = g[i];
		if (p.applyDecay != 0u) xi = xi * p.decay;
		precise float mb = m[i] * p.b1;
		precise float mi = fma(gi, p.a1, mb);
		precise float vb = v[i] * p.b2;
		precise float ag = p.a2 * gi;
		precise float vi = fma(ag, gi, vb);
		m[i] = mi;
		v[i] = vi;
		precise float den = sqrt(vi) / p.bc2Sqrt + p.eps;
		precise float u = (p.negStep * mi) / den;
		x[i] = xi + u;
	}
}
