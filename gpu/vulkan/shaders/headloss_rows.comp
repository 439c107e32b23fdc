#version 450
// Cross-entropy over rows of logits, one workgroup of 256 invocations per
// row (grid-stride over rows), as nn's crossEntropyOp and headLossOp
// compute each row:
//   mode 0: dst = softmax(src); rowLoss = log Σ exp(src) − src[target]
//   mode 1: mode 0, then dst = scale·(softmax − onehot(target)), the
//           logits' gradient, scale = seed[0]/count (LMHeadLoss's forward)
//   mode 2: dst = scale·(src − onehot(target)) from probabilities src
//           (crossEntropyOp's backward)
//   mode 3: mode 2 with each row's own scale, −seed[row/per]: the
//           gradient of sequences of per rows' summed log-probabilities
//           (seqLogProbsOp's backward; count is unused)
//   mode 4: mode 1 with that scale (SequenceLogProbsHead's backward,
//           which computes each block of logits again)
// A row whose target is ignored (or outside [0, V): the host checks the
// targets before it records) has loss 0 and gradient 0; so do all rows
// when count is 0. src and dst may be the same buffer: each invocation
// writes only the elements it read, after a barrier that follows every
// read of another invocation's element (the target's logit).
//
// The row's maximum is exact in any order. The exps (within 3+2|x| ulp
// in Vulkan, x ≤ 0) are summed in fp32: each invocation its strided
// elements in order, then a tree of 8 levels over shared memory, so the
// sum S is within γ_{⌈V/256⌉+8}·S of the exact sum of the computed exps
// (the CPU sums them in float64). The loss is (m − src[t]) + log S, both
// terms ≥ 0: within 2u relative plus log's error (2^-21 absolute for
// S in [1, 2], 3 ulp above; S ≥ 1 since the maximum's exp is 1).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) buffer BufSrc { float src[]; };
layout(std430, set = 0, binding = 1) buffer BufDst { float dst[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufT { int targets[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufSeed { float seed[]; };
layout(std430, set = 0, binding = 4) buffer BufLoss { float rowLoss[]; };

layout(push_constant) uniform Params {
	uint rows, v;
	uint first; // the row of targets and rowLoss that row 0 is
	uint mode;
	uint count; // non-ignored targets of the whole loss
	uint per;   // mode 3: rows per sequence
} p;

shared float red[256];

void main() {
	uint t = gl_LocalInvocationID.x;
	float scale = 0.0;
	if (p.mode != 0u && p.count > 0u) {
		scale = seed[0] / float(p.count);
	}
	for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
		uint base = r * p.v;
		int tg = targets[p.first + r];
		bool kept = tg >= 0 && uint(tg) < p.v;
		if (p.mode == 3u || p.mode == 4u) {
			scale = -seed[(p.first + r) / p.per];
		}
		if (p.mode == 2u || p.mode == 3u) {
			for (uint j = t; j < p.v; j += 256u) {
				precise float d = 0.0;
				if (kept && (p.count > 0u || p.mode == 3u)) {
					d = scale * src[base + j];
					if (j == uint(tg)) d = d - scale;
				}
				dst[base + j] = d;
			}
			continue;
		}
		float m = -1.0 / 0.0;
		for (uint j = t; j < p.v; j += 256u) m = max(m, src[base + j]);
		red[t] = m;
		barrier();
		for (uint h = 128u; h > 0u; h >>= 1) {
			if (t < h) red[t] = max(red[t], red[t + h]);
			barrier();
		}
		m = red[0];
		float lt = kept ? src[base + uint(tg)] : 0.0;
		barrier(); // every read of red[0] and src[target] before any write
		float s = 0.0;
		for (uint j = t; j < p.v; j += 256u) {
			float e = exp(src[base + j] - m);
			dst[base + j] = e;
			s += e;
		}
		red[t] = s;
		barrier();
		for (uint h = 128u; h > 0u; h >>= 1) {
			if (t < h) red[t] += red[t + h];
			barrier();
		}
		float sum = red[0];
		barrier(); // red[0] read by all before the next row's maximum
		float inv = 1.0 / sum;
		for (uint j = t; j < p.v; j += 256u) {
			precise float q = dst[base + j] * inv;
			if (p.mode == 1u || p.mode == 4u) {
				if (kept && (p.count > 0u || p.mode == 4u)) {
					q = scale * q;
					if (j == uint(tg)) q = q - scale;
				} else {
					q = 0.0;
				}
			}
			dst[base + j] = q;
		}
		if (t == 0u) {
			precise float l = 0.0;
			if (kept) l = (m - lt) + log(sum);
			rowLoss[p.first + r] = l;
		}
	}
}
