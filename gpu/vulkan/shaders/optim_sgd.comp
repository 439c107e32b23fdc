#version 450
// One SGD step (torch.optim.SGD, dampening 0) over n fp32 parameters in
// the order and with the fused multiply-adds of mixtune's optim.SGD.update:
//   g = fma(x, wd, g)                  (when weight decay is applied)
//   momentum 0:  x = fma(g, −lr, x)
//   else:        b = first ? g : b·mom + g   (the product rounded first)
//                d = nesterov ? fma(b, mom, g) : b
//                x = fma(d, −lr, x)
// "precise" keeps the compiler from contracting b·mom + g; Vulkan's fma
// may be unfused (one more rounding of the product), so results match
// the CPU to an ulp of each product, not bit for bit (see TestSGD).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufG { float g[]; };
layout(std430, set = 0, binding = 2) buffer BufB { float b[]; };

layout(push_constant) uniform Params {
	uint n;
	uint applyDecay;
	uint useMomentum;
	uint first;
	uint nesterov;
	float wd, mom, negLR;
} p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		precise float xi = x[i];
		precise float gi = g[i];
		if (p.applyDecay != 0u) gi = fma(xi, p.wd, gi);
		precise float d = gi;
		if (p.useMomentum != 0u) {
			precise float bi = gi;
			if (p.first == 0u) {
				precise float bm = b[i] * p.mom;
				bi = bm + gi;
			}
			b[i] = bi;
			d = bi;
			if (p.nesterov != 0u) d = fma(bi, p.mom, gi);
		}
		x[i] = fma(d, p.negLR, xi);
	}
}
