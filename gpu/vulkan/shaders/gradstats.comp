#version 450
// Gradient statistics for one tensor of n fp32 values, in two passes with
// a fixed reduction order (the same bits on every run):
//   pass 0: workgroup w of G (G from the host, a function of n alone)
//     takes the contiguous chunk [w·c, min((w+1)·c, n)), c = ⌈n/G⌉; each
//     of its 256 invocations sums the squares of its strided elements with
//     Kahan compensation and counts zeros and non-finite values; a tree
//     over shared memory (8 levels) gives the chunk's three numbers,
//     written to part[3w..3w+2].
//   pass 1: one workgroup adds the G partial sums by the same tree
//     (G ≤ 256) and writes out[3·slot..3·slot+2]: the sum of squares (fp32
//     bits), the zero count and the non-finite count.
// Error of the sum of squares: each invocation's compensated sum is within
// 2u of its exact value (plus O(k·u²)), and each of the 8 + 8 tree levels
// adds at most u relative: about 18u ≈ 1.1e-6 relative over the whole sum,
// all terms being non-negative.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufG { float g[]; };
layout(std430, set = 0, binding = 1) buffer BufPart { uint part[]; };
layout(std430, set = 0, binding = 2) buffer BufOut { uint outv[]; };

layout(push_constant) uniform Params {
	uint n;
	uint groups; // G
	uint pass;
	uint slot;
	uint off; // the tensor's first value in g
} p;

shared float ss[256];
shared uint zs[256];
shared uint bs[256];

void reduce(uint t) {
	barrier();
	for (uint h = 128u; h > 0u; h >>= 1) {
		if (t < h) {
			precise float a = ss[t] + ss[t + h];
			ss[t] = a;
			zs[t] += zs[t + h];
			bs[t] += bs[t + h];
		}
		barrier();
	}
}

void main() {
	uint t = gl_LocalInvocationID.x;
	if (p.pass == 0u) {
		uint w = gl_WorkGroupID.x;
		uint c = (p.n + p.groups - 1u) / p.groups;
		uint lo = w * c, hi = min(lo + c, p.n);
		precise float sum = 0.0, comp = 0.0;
		uint zeros = 0u, bad = 0u;
		for (uint i = lo + t; i < hi; i += 256u) {
			float v = g[p.off + i];
			if (v == 0.0) zeros++;
			if (isnan(v) || isinf(v)) bad++;
			precise float y = v * v - comp;
			precise float s2 = sum + y;
			comp = (s2 - sum) - y;
			sum = s2;
		}
		ss[t] = sum;
		zs[t] = zeros;
		bs[t] = bad;
		reduce(t);
		if (t == 0u) {
			part[3u * w] = floatBitsToUint(ss[0]);
			part[3u * w + 1u] = zs[0];
			part[3u * w + 2u] = bs[0];
		}
		return;
	}
	ss[t] = t < p.groups ? uintBitsToFloat(part[3u * t]) : 0.0;
	zs[t] = t < p.groups ? part[3u * t + 1u] : 0u;
	bs[t] = t < p.groups ? part[3u * t + 2u] : 0u;
	reduce(t);
	if (t == 0u) {
		outv[3u * p.slot] = floatBitsToUint(ss[0]);
		outv[3u * p.slot + 1u] = zs[0];
		outv[3u * p.slot + 2u] = bs[0];
	}
}
