#version 450
// Rotary position embedding, HF's rotate_half pairing: in each head of
// width 2·halfDim, element k pairs with element k + halfDim and the pair is
// rotated by the angle of its row's position and k:
//   y1 = a·cos − b·sin', y2 = b·cos + a·sin',  sin' = sign·sin
// (sign −1: the inverse rotation, RoPE's backward), as nn's
// RopeTable.RotateRows computes it, each product and sum rounded once
// (precise: no fused multiply-add). cos and sin come from table: cos for
// seqLen positions × half, then sin likewise (nn.NewRopeTableFreqs's
// fp32 values). Row r is at position pos[r] when hasPos is set, else at
// r mod seqLen. One invocation per pair, grid-stride over
// rows·heads·halfDim; a position outside the table leaves its row unwritten
// (the host rejects such positions before recording).

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufX { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufT { float table[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufP { int pos[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufY { float y[]; };

layout(push_constant) uniform Params {
	uint pairs; // rows·heads·halfDim
	uint heads, halfDim, seqLen, hasPos;
	float sign;
} p;

void main() {
	uint stride = gl_NumWorkGroups.x * 256u;
	for (uint i = gl_GlobalInvocationID.x; i < p.pairs; i += stride) {
		uint k = i % p.halfDim;
		uint rh = i / p.halfDim;
		uint r = rh / p.heads;
		uint at = r % p.seqLen;
		if (p.hasPos != 0u) {
			int q = pos[r];
			if (q < 0 || uint(q) >= p.seqLen) continue;
			at = uint(q);
		}
		uint e1 = rh * 2u * p.halfDim + k; // head h of row r starts at (r·heads + h)·2·halfDim
		uint e2 = e1 + p.halfDim;
		float c = table[at * p.halfDim + k];
		precise float s = p.sign * table[(p.seqLen + at) * p.halfDim + k];
		float a = x[e1], b = x[e2];
		precise float y1 = a * c - b * s;
		precise float y2 = b * c + a * s;
		y[e1] = y1;
		y[e2] = y2;
	}
}
