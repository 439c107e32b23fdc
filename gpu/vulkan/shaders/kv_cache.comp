#version 450
#extension GL_GOOGLE_include_directive : require
// Decoding's key/value cache (nn.KVCache on the device). The cache of a
// layer is [slots, capacity, width] fp32 values: slot s holds sequence
// s's keys (or values), token j at row s·capacity + j. A run's rows are
// new tokens: row r continues sequence slot[r] at position pos[r].
// Compiled twice:
//   -DAPPEND  kc[slot[r], pos[r], :] = k[r, :] and vc likewise, one
//             invocation per value, grid-stride: a copy, bit for bit.
//   (none)    attention of each new row over its sequence's cache, the
//             cache already holding the run's rows: query row r of head
//             h attends to keys first..pos[r] of its slot (first is 0,
//             or pos[r] − window + 1 when window > 0), key/value head
//             h / (H / KVH), with nn's decoding attention's rounding
//             points: S = round(fS, scale·q·kᵀ), P = round(fP,
//             softmax(S)), O = round(fO, round(fV, P)·V).
//
// Attention runs one workgroup of 64 invocations per (head, row). Each
// score is one invocation's fma chain in d order; the row's max is
// exact in any order; the exponentials' sum adds each invocation's keys
// in order, then a tree of 6 levels over shared memory, an order fixed
// by the row's length alone; each output value is one invocation's fma
// chain over the keys in order. So a run's results are the same on
// every run, and within γ_{D}·Σ|q·k| (scores), γ_{n/64+6} (the sum) and
// γ_{n}·Σ|p·v| (the output) of exact arithmetic on the same inputs: the
// CPU engine's kernels sum in other orders, so the two agree to those
// bounds, not bit for bit. Scores live in scratch [rows·H, capacity].

layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

#include "half.glsl"

#ifdef APPEND
layout(std430, set = 0, binding = 0) readonly buffer BufK { float k[]; };   // [rows, width]
layout(std430, set = 0, binding = 1) readonly buffer BufV { float v[]; };   // [rows, width]
layout(std430, set = 0, binding = 2) readonly buffer BufSlot { int slot[]; }; // [rows]
layout(std430, set = 0, binding = 3) readonly buffer BufPos { int pos[]; };   // [rows]
layout(std430, set = 0, binding = 4) writeonly buffer BufKC { float kc[]; };
layout(std430, set = 0, binding = 5) writeonly buffer BufVC { float vc[]; };

layout(push_constant) uniform Params {
	uint rows, width, cap;
} p;

void main() {
	uint n = p.rows * p.width, stride = gl_NumWorkGroups.x * 64u;
	for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {
		uint r = i / p.width, j = i % p.width;
		uint at = (uint(slot[r]) * p.cap + uint(pos[r])) * p.width + j;
		kc[at] = k[i];
		vc[at] = v[i];
	}
}
#else
layout(std430, set = 0, binding = 0) readonly buffer BufQ { float q[]; };     // [rows, H·D]
layout(std430, set = 0, binding = 1) readonly buffer BufKC { float kc[]; };   // [slots, cap, KVH·D]
layout(std430, set = 0, binding = 2) readonly buffer BufVC { float vc[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufSlot { int slot[]; }; // [rows]
layout(std430, set = 0, binding = 4) readonly buffer BufPos { int pos[]; };   // [rows]
layout(std430, set = 0, binding = 5) buffer BufS { float s[]; };              // [rows·H, cap]
layout(std430, set = 0, binding = 6) writeonly buffer BufO { float o[]; };    // [rows, H·D]

layout(push_constant) uniform Params {
	uint rows, H, KVH, D, cap, window;
	float scale;
	uint fS, fP, fV, fO; // formats, numbered as half.glsl's
} p;

shared float red[64];

void main() {
	uint t = gl_LocalInvocationID.x;
	uint h = gl_WorkGroupID.x, r = gl_WorkGroupID.y;
	uint at = uint(pos[r]), first = 0u;
	if (p.window > 0u && at + 1u > p.window) first = at + 1u - p.window;
	uint width = p.KVH * p.D, kh = h / (p.H / p.KVH);
	uint qb = r * p.H * p.D + h * p.D;
	uint cb = uint(slot[r]) * p.cap * width + kh * p.D;
	uint sb = (r * p.H + h) * p.cap;

	// scores and their max
	float m = -3.402823466e38;
	for (uint j = first + t; j <= at; j += 64u) {
		float acc = 0.0;
		for (uint d = 0u; d < p.D; d++) acc = fma(q[qb + d], kc[cb + j * width + d], acc);
		float x = rnd(p.scale * acc, p.fS);
		s[sb + j] = x;
		m = max(m, x);
	}
	red[t] = m;
	barrier();
	for (uint w = 32u; w > 0u; w >>= 1) {
		if (t < w) red[t] = max(red[t], red[t + w]);
		barrier();
	}
	m = red[0];
	barrier();

	// exponentials and their sum
	float sum = 0.0;
	for (uint j = first + t; j <= at; j += 64u) {
		float e = exp(s[sb + j] - m);
		s[sb + j] = e;
		sum += e;
	}
	red[t] = sum;
	barrier();
	for (uint w = 32u; w > 0u; w >>= 1) {
		if (t < w) red[t] += red[t + w];
		barrier();
	}
	float inv = 1.0 / red[0];
	for (uint j = first + t; j <= at; j += 64u) s[sb + j] = rnd(rnd(s[sb + j] * inv, p.fP), p.fV);
	memoryBarrierBuffer();
	barrier();

	// O = P·V, each output value one invocation's chain over the keys
	for (uint d = t; d < p.D; d += 64u) {
		float acc = 0.0;
		for (uint j = first; j <= at; j++) acc = fma(s[sb + j], vc[cb + j * width + d], acc);
		o[qb + d] = rnd(acc, p.fO);
	}
}
#endif
