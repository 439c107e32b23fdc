#version 450
// Embedding lookup: y[r, j] = table[ids[r], j] for n = rows·d outputs,
// one invocation per value, grid-stride. Compiled twice: as is (the
// table is fp32), and with -DB16, where the table holds 16-bit values
// (bf16, or fp16 when fp16 != 0), two to a 32-bit word, element e in the
// low half of word e/2 when e is even, widened to fp32 exactly (as
// gemm.comp's B16 operand). An id outside [0, v) gives a zero row (the
// host rejects such ids before recording). A copy: bit for bit the CPU's.

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufIDs { int ids[]; };
#ifdef B16
layout(std430, set = 0, binding = 1) readonly buffer BufT { uint table[]; };
#else
layout(std430, set = 0, binding = 1) readonly buffer BufT { float table[]; };
#endif
layout(std430, set = 0, binding = 2) writeonly buffer BufY { float y[]; };

layout(push_constant) uniform Params {
	uint n, d, v;
	uint fp16; // B16 only: 1 if the table is fp16, 0 if bf16
} p;

float load(uint e) {
#ifdef B16
	uint h = (table[e >> 1] >> ((e & 1u) * 16u)) & 0xffffu;
	if (p.fp16 == 0u) return uintBitsToFloat(h << 16);
	// fp16 → fp32 in integer code (exact; no driver's denormal mode applies).
	uint s = (h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (ex == 0u) {
		float v = float(m) * 5.9604644775390625e-8; // m·2^-24, exact
		return s != 0u ? -v : v;
	}
	if (ex == 31u) return uintBitsToFloat(s | 0x7f800000u | (m << 13));
	return uintBitsToFloat(s | ((ex + 112u) << 23) | (m << 13));
#else
	return table[e];
#endif
}

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
		uint r = i / p.d, j = i % p.d;
		int id = ids[r];
		y[i] = id < 0 || uint(id) >= p.v ? 0.0 : load(uint(id) * p.d + j);
	}
}
