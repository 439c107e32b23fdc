package vulkan

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// gamma is γ_n = n·u/(1−n·u) with u = 2^-24: the relative bound on n
// float32 roundings in a row (Higham, Accuracy and Stability, §3.1).
func gamma(n int) float64 {
	nu := float64(n) * 0x1p-24
	return nu / (1 - nu)
}

// gemmCase is one GEMM checked against a float64 reference.
type gemmCase struct {
	m, n, k        int
	transA, transB bool
	alpha, beta    float32
	pad, off       int // extra leading-dimension columns; element offset of each matrix
	b16            bool
	half           Half
	// operands, when set, rounds A and B to that format and asks Gemm for
	// its tensor-core variant; aScale scales A's values (tiny ones make
	// fp16 subnormals).
	operands Rounding
	aScale   float64
	// splits is GemmArgs.Splits: 0 lets Gemm split K where the shape
	// asks for it, 1 keeps one pass (the tensor-core cases: a split
	// product runs on the scalar kernel).
	splits int
	// out, when set, receives C as Gemm left it.
	out *[]float32
}

func (c gemmCase) String() string {
	s := fmt.Sprintf("%dx%dx%d_tA%v_tB%v_a%g_b%g_pad%d_off%d", c.m, c.n, c.k, c.transA, c.transB, c.alpha, c.beta, c.pad, c.off)
	if c.b16 {
		s += "_" + c.half.String()
	}
	if c.operands != NoRounding {
		s += "_ops" + c.operands.String()
	}
	if c.aScale != 0 {
		s += fmt.Sprintf("_ascale%g", c.aScale)
	}
	if c.splits != 0 {
		s += fmt.Sprintf("_splits%d", c.splits)
	}
	return s
}

// tensorGamma is gamma for tensor-core accumulation: NVIDIA's tensor
// cores add fp32 with truncation after aligning to the largest exponent
// (Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA
// tensor cores", PeerJ CS 2021), so each addition is within 2^-23, one
// fp32 ulp, rather than half of one: u = 2^-23.
func tensorGamma(n int) float64 {
	nu := float64(n) * 0x1p-23
	return nu / (1 - nu)
}

// run computes the case on the device and returns the worst error as a
// fraction of its bound. The bound on each element is
// γ_{k+2}·(|α|·Σ|a||b| + |β·c|): k fused multiply-adds into the
// accumulator, then α·acc and the fma with β·c, one rounding each; the
// float64 reference's own error is below it by a factor of 2^29. A
// product split into S chunks of at most c values of K (split-K) is held
// to γ_{c+S+1}: c fmas into a chunk's sum, S−1 additions of the chunks'
// sums, α and β.
func (c gemmCase) run(t *testing.T, ks *Kernels, d *Device, rng *rand.Rand) float64 {
	t.Helper()
	ar, ac := c.m, c.k
	if c.transA {
		ar, ac = c.k, c.m
	}
	br, bc := c.k, c.n
	if c.transB {
		br, bc = c.n, c.k
	}
	lda, ldb, ldc := ac+c.pad, bc+c.pad, c.n+c.pad
	a := make([]float32, c.off+ar*lda)
	b := make([]float32, c.off+br*ldb)
	cm := make([]float32, c.off+c.m*ldc)
	scale := 1.0
	if c.aScale != 0 {
		scale = c.aScale
	}
	var round func(float32) float32 // the operands' format, exactly as the policy rounds
	switch c.operands {
	case RoundFP16:
		round = func(x float32) float32 { return amp.FP16.FromBits16(amp.FP16.Bits16(x)) }
	case RoundBF16:
		round = func(x float32) float32 { return amp.BF16.FromBits16(amp.BF16.Bits16(x)) }
	default:
		round = func(x float32) float32 { return x }
	}
	for i := range a {
		a[i] = round(float32(rng.NormFloat64() * scale))
	}
	for i := range b {
		b[i] = round(float32(rng.NormFloat64()))
	}
	for i := range cm {
		cm[i] = float32(rng.NormFloat64())
	}
	var bh []uint16
	if c.b16 {
		f := amp.BF16
		if c.half == FP16 {
			f = amp.FP16
		}
		bh = make([]uint16, len(b))
		for i := range b {
			bh[i] = f.Bits16(b[i])
			b[i] = f.FromBits16(bh[i]) // the reference multiplies the widened values
		}
	}
	newBuf := func(n int) *Buffer {
		buf, err := d.NewBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(buf.Free)
		return buf
	}
	A, C := newBuf(4*len(a)), newBuf(4*len(cm))
	var B *Buffer
	if c.b16 {
		B = newBuf(2*len(bh) + 2)
		must(t, B.WriteUint16(0, bh))
	} else {
		B = newBuf(4 * len(b))
		must(t, B.WriteFloat32(0, b))
	}
	must(t, A.WriteFloat32(0, a))
	must(t, C.WriteFloat32(0, cm))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	args := GemmArgs{
		M: c.m, N: c.n, K: c.k, TransA: c.transA, TransB: c.transB, Alpha: c.alpha, Beta: c.beta,
		A: A, B: B, C: C, Lda: lda, Ldb: ldb, Ldc: ldc, AOff: c.off, BOff: c.off, COff: c.off,
		B16: c.b16, BHalf: c.half, Operands: c.operands, Splits: c.splits,
	}
	must(t, ks.Gemm(r, args))
	must(t, r.Submit())
	got := make([]float32, len(cm))
	must(t, C.ReadFloat32(0, got))
	if c.out != nil {
		*c.out = got
	}

	worst := 0.0
	g := gamma(c.k + 2)
	if chunks, chunk := ks.SplitK(args); chunks > 1 {
		g = gamma(chunk + chunks + 1)
	}
	var scalar []float32 // the fp32 kernel's C, for a tensor-core case
	if c.operands != NoRounding {
		g = tensorGamma(c.k + 2)
		must(t, C.WriteFloat32(0, cm))
		args.Operands = NoRounding
		must(t, ks.Gemm(r, args))
		must(t, r.Submit())
		scalar = make([]float32, len(cm))
		must(t, C.ReadFloat32(0, scalar))
	}
	for i := range c.m {
		for j := range c.n {
			var s, sa float64
			for p := range c.k {
				ai, bi := c.off+i*lda+p, c.off+p*ldb+j
				if c.transA {
					ai = c.off + p*lda + i
				}
				if c.transB {
					bi = c.off + j*ldb + p
				}
				av, bv := a[ai], b[bi]
				s += float64(av) * float64(bv)
				sa += math.Abs(float64(av) * float64(bv))
			}
			ci := c.off + i*ldc + j
			want := float64(c.alpha)*s + float64(c.beta)*float64(cm[ci])
			bound := g * (math.Abs(float64(c.alpha))*sa + math.Abs(float64(c.beta)*float64(cm[ci])))
			e := math.Abs(float64(got[ci]) - want)
			if !(e <= bound) { // also catches NaN
				t.Fatalf("C[%d,%d] = %g, want %g ± %.3g (error %.3g)", i, j, got[ci], want, bound, e)
			}
			if scalar != nil {
				// Both within their bounds of the exact value: within
				// the sum of the bounds of each other.
				sb := bound + gamma(c.k+2)*(math.Abs(float64(c.alpha))*sa+math.Abs(float64(c.beta)*float64(cm[ci])))
				if d := math.Abs(float64(got[ci]) - float64(scalar[ci])); !(d <= sb) {
					t.Fatalf("C[%d,%d] = %g; the fp32 kernel gives %g (difference %.3g > %.3g)", i, j, got[ci], scalar[ci], d, sb)
				}
			}
			if bound > 0 {
				worst = max(worst, e/bound)
			}
		}
	}
	// Everything outside op(A)·op(B)'s M×N block is untouched.
	for idx := range cm {
		in := idx >= c.off && (idx-c.off)%ldc < c.n && (idx-c.off)/ldc < c.m
		if !in && got[idx] != cm[idx] {
			t.Fatalf("C element %d, outside the %d×%d result, changed from %g to %g", idx, c.m, c.n, cm[idx], got[idx])
		}
	}
	return worst
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// underValidation reports whether the tests run under the Khronos
// validation layer (.ci/run's second pass of the short tests).
func underValidation() bool {
	return strings.Contains(os.Getenv("VK_INSTANCE_LAYERS"), "VK_LAYER_KHRONOS_validation")
}

// emulatedTiles is the tensor-core tiles whose emulated builds a test
// runs on device p: all of them, except under the Khronos validation
// layer, which rejects (rightly) a shader using more workgroup memory than
// the device reports. lavapipe reports 32 KiB but runs the 33 and 37 KiB
// tiles correctly, so the plain run covers every tile and the validation
// run the tiles within the limit. A real device never gets a tile over its
// limit (the variant choice checks it: TestChooseGemmFor).
func emulatedTiles(t *testing.T, p *PhysicalDevice) []coopTile {
	var tiles []coopTile
	for _, tile := range coopTiles() {
		if underValidation() && tile.sharedBytes() > p.MaxSharedMemory {
			t.Logf("%s: %d bytes of shared memory, over the %d %s reports: left out under the validation layer", tile.name, tile.sharedBytes(), p.MaxSharedMemory, p.Name)
			continue
		}
		tiles = append(tiles, tile)
	}
	if len(tiles) == 0 {
		t.Skipf("no tensor-core tile fits %s's %d bytes of shared memory", p.Name, p.MaxSharedMemory)
	}
	return tiles
}

func openKernels(t testing.TB) (*testEnv, *Kernels) {
	e := openTest(t)
	ks, err := NewKernels(e.dev)
	must(t, err)
	t.Cleanup(ks.Close)
	return e, ks
}

// TestGemm checks every transpose combination at sizes on and off the
// 64×64×16 tiles against a float64 reference, within the fp32
// accumulation bound.
func TestGemm(t *testing.T) {
	e, ks := openKernels(t)
	t.Logf("GEMM variant %s on %s", ks.Variant.Name, e.dev.Physical.Name)
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {64, 64, 16}, {65, 63, 17}, {128, 96, 128}, {31, 100, 1}, {128, 128, 128}}
	if testing.Short() {
		sizes = sizes[:4]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	for _, s := range sizes {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			c := gemmCase{m: s[0], n: s[1], k: s[2], transA: tr[0], transB: tr[1], alpha: 1}
			if s[0]%2 == 1 { // odd sizes also scale, accumulate into C, and use strides and offsets
				c.alpha, c.beta, c.pad, c.off = 1.5, -0.75, 3, 5
			}
			t.Run(c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
		}
	}
	t.Logf("worst error: %.3f of the bound γ_{k+2}·(|α|Σ|a||b| + |βc|)", worst)
}

// TestGemmTensorCores checks each tensor-core variant the device runs
// against a float64 reference within the tensor-core accumulation bound
// γ_{k+2} (u = 2^-23), and against the scalar tiled kernel, on values of
// its 16-bit format: every transpose combination, sizes on and off the
// 128×128×32 tiles, strides, offsets, α and β, 16-bit B of its format
// (and of the other, which falls back to the fp32 kernel), and fp16
// subnormal operands (a kernel that flushed them would miss by far more
// than the bound).
func TestGemmTensorCores(t *testing.T) {
	e, ks := openKernels(t)
	var variants []GemmVariant // every tile of every format the device runs, the chosen ones first
	for _, f := range []Rounding{RoundFP16, RoundBF16} {
		if v, ok := ks.GemmVariantFor(f); ok {
			t.Logf("%s operands: GEMM variant %s", f, v.Name)
			variants = append(variants, v)
		}
	}
	if len(variants) == 0 {
		t.Skipf("%s has no tensor-core GEMM: fp16 needs VK_NV_cooperative_matrix, bf16 VK_KHR_cooperative_matrix with VK_KHR_shader_bfloat16, "+
			"each listing the 16×16×16 subgroup shape with fp32 accumulation (shapes listed: %v)", e.dev.Physical.Name, e.dev.Physical.CoopMatShapes)
	}
	for _, v := range GemmVariants() {
		if v.Operands != NoRounding && v.Supported(e.dev.Physical) && v.Name != variants[0].Name && (len(variants) < 2 || v.Name != variants[1].Name) {
			variants = append(variants, v)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	// Even sizes are aligned (16-byte loads of whole tiles, C stored from
	// the fragments); odd ones are not, with α and β ≠ 0. 264×272×96
	// holds whole tiles of every coopTile.
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {16, 16, 16}, {128, 128, 32}, {127, 129, 33}, {128, 128, 256}, {200, 96, 300}, {257, 255, 64}, {64, 384, 1000}, {264, 272, 96}}
	for _, v := range variants {
		f := v.Operands
		if g, _ := ks.GemmVariantFor(f); g.Name != v.Name {
			must(t, ks.UseGemmVariant(v))
		}
		worst := 0.0
		half := BF16
		if f == RoundFP16 {
			half = FP16
		}
		for _, s := range sizes {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				c := gemmCase{m: s[0], n: s[1], k: s[2], transA: tr[0], transB: tr[1], alpha: 1, operands: f, splits: 1}
				if s[0]%2 == 1 {
					c.alpha, c.beta, c.pad, c.off = 1.5, -0.75, 3, 5
				}
				t.Run(v.Name+"/"+c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
				c.b16, c.half = true, half
				t.Run(v.Name+"/"+c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
			}
		}
		other := gemmCase{m: 65, n: 63, k: 40, transB: true, alpha: 1, b16: true, half: 1 - half, operands: f}
		t.Run(v.Name+"/"+other.String(), func(t *testing.T) { other.run(t, ks, e.dev, rng) })
		if f == RoundFP16 { // |a| ≈ 2^-16: fp16 subnormals (below 2^-14)
			sub := gemmCase{m: 130, n: 70, k: 48, alpha: 1, operands: f, aScale: 0x1p-16}
			t.Run(v.Name+"/"+sub.String(), func(t *testing.T) { worst = max(worst, sub.run(t, ks, e.dev, rng)) })
		}
		t.Logf("%s: worst error %.3f of the bound γ_{k+2}·(|α|Σ|a||b| + |βc|), u = 2^-23", v.Name, worst)
	}
}

// TestUseGemmVariantRefuses: UseGemmVariant takes only tensor-core
// variants the device runs, and a refusal leaves the variants in use.
func TestUseGemmVariantRefuses(t *testing.T) {
	e, ks := openKernels(t)
	before := ks.GemmNames()
	for _, v := range GemmVariants() {
		err := ks.UseGemmVariant(v)
		switch {
		case v.Operands == NoRounding:
			if err == nil || !strings.Contains(err.Error(), "not a tensor-core variant") {
				t.Errorf("%s: %v, want a refusal", v.Name, err)
			}
		case !v.Supported(e.dev.Physical):
			if err == nil || !strings.Contains(err.Error(), "does not run on") {
				t.Errorf("%s: %v, want a refusal", v.Name, err)
			}
		}
	}
	if !ks.d.Physical.tensorAny(RoundFP16) && !ks.d.Physical.tensorAny(RoundBF16) {
		if got := ks.GemmNames(); got != before {
			t.Errorf("after the refusals GEMM variants are %q, were %q", got, before)
		}
	}
}

// TestGemmCoopmatEmulated runs the tensor-core kernel's source on any
// device, lavapipe included, with its fragments emulated in plain code
// (gemm_coopmat.comp built with -DEMULATE: the cooperative-matrix calls'
// arguments and row-major semantics, fp32 fmas in k order), against the
// float64 reference, for every tile of coopTiles, as TestGemmTensorCores
// does on real tensor cores. It checks all of the kernel but the fragment
// instructions themselves: the 16-bit narrowing, the tiles' loads in
// every transpose (16-byte loads of whole aligned tiles, element loads of
// edge tiles and misaligned layouts), the shared layout and strides the
// fragments are read with, ragged edges, the K loop's prefetch and
// stages, α, β and both ways out (fragments stored to C, the scratch).
func TestGemmCoopmatEmulated(t *testing.T) {
	e, ks := openKernels(t)
	defer func() { delete(ks.gemm, RoundFP16); delete(ks.gemm, RoundBF16) }()
	// A (BM+4)×(BN+8)×40 product holds whole tiles (with offsets and
	// leading dimensions multiples of 4 when aligned: 16-byte loads, C
	// stored from the fragments when β = 0) and ragged ones in M, N and K
	// (40 is no multiple of 16 or 32).
	type shape struct {
		m, n, k     int // -1: the tile's M or N plus 4 or 8
		alpha, beta float32
		pad, off    int
	}
	shapes := []shape{
		{3, 5, 7, 1, 0, 0, 0},            // below one tile
		{127, 129, 33, 1.5, -0.75, 3, 5}, // ragged, misaligned
		{-1, -1, 40, 1.25, 0, 4, 8},      // aligned: 16-byte loads, C from the fragments
		{-1, -1, 40, 1, 0, 3, 5},         // misaligned: element loads, C through the scratch
		{-1, -1, 40, -0.5, 0.75, 4, 4},   // aligned, β ≠ 0: 16-byte loads, C through the scratch
	}
	if testing.Short() {
		shapes = shapes[:3]
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, tile := range emulatedTiles(t, ks.d.Physical) {
		for _, emu := range []struct {
			f        Rounding
			h        string
			f32, b16 bool
		}{{RoundFP16, "fp16", true, true}, {RoundBF16, "bf16", false, true}} {
			g := gemmKernels{v: GemmVariant{Name: "emulated coopmat " + emu.h + " " + tile.name, Tile: tile.name, Operands: emu.f, Workgroup: [2]uint32{tile.m, tile.n}}}
			var err error
			if emu.f32 {
				g.f32, err = ks.kernel(tile.spirv(emu.h, "f32", true), 3, gemmPush)
				must(t, err)
			}
			g.b16, err = ks.kernel(tile.spirv(emu.h, "b16", true), 3, gemmPush)
			must(t, err)
			ks.gemm[emu.f] = g
		}
		want := fmt.Sprintf("%s, fp16 products on emulated coopmat fp16 %s, bf16 products on emulated coopmat bf16 %s", ks.Variant.Name, tile.name, tile.name)
		if got := ks.GemmNames(); got != want {
			t.Errorf("GemmNames() = %q, want %q", got, want)
		}
		worst := 0.0
		for _, s := range shapes {
			if s.m < 0 {
				s.m, s.n = int(tile.m)+4, int(tile.n)+8
			}
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				c := gemmCase{m: s.m, n: s.n, k: s.k, transA: tr[0], transB: tr[1], alpha: s.alpha, beta: s.beta, pad: s.pad, off: s.off, operands: RoundFP16}
				t.Run(tile.name+"/"+c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
				c.b16, c.half = true, FP16
				t.Run(tile.name+"/"+c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
				c.operands, c.half = RoundBF16, BF16
				t.Run(tile.name+"/"+c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
			}
		}
		sub := gemmCase{m: 130, n: 70, k: 48, alpha: 1, operands: RoundFP16, aScale: 0x1p-16}
		t.Run(tile.name+"/"+sub.String(), func(t *testing.T) { worst = max(worst, sub.run(t, ks, e.dev, rng)) })
		t.Logf("%s: worst error %.3f of the bound", tile.name, worst)
	}
}

// TestCoopTilesMatchBuild: each coopTile's sizes are those its build
// flags in shaders/build.txt give gemm_coopmat.comp (the source's
// defaults where a build names none), so the dispatch grid, the shared
// memory asked of the device and the kernel agree.
func TestCoopTilesMatchBuild(t *testing.T) {
	list, err := os.ReadFile("shaders/build.txt")
	if err != nil {
		t.Skip("no shaders/build.txt here: the test binary runs outside gpu/vulkan's sources")
	}
	flags := map[string][]string{}
	for _, line := range strings.Split(string(list), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && !strings.HasPrefix(line, "#") {
			flags[f[0]] = f[2:]
		}
	}
	for _, tile := range coopTiles() {
		for _, file := range []string{tile.spirv("fp16", "f32", false), tile.spirv("fp16", "b16", false), tile.spirv("fp16", "f32", true), tile.spirv("bf16", "b16", true)} {
			fl, ok := flags[file]
			if !ok {
				t.Errorf("%s: %s not in build.txt", tile.name, file)
				continue
			}
			d := map[string]uint32{"SG_M": 2, "SG_N": 4, "FR_M": 4, "FR_N": 2, "BK": 32} // gemm_coopmat.comp's defaults
			for _, x := range fl {
				if k, v, ok := strings.Cut(strings.TrimPrefix(x, "-D"), "="); ok {
					n, err := strconv.Atoi(v)
					must(t, err)
					d[k] = uint32(n)
				}
			}
			m, n, inv := 16*d["SG_M"]*d["FR_M"], 16*d["SG_N"]*d["FR_N"], 32*d["SG_M"]*d["SG_N"]
			if m != tile.m || n != tile.n || d["BK"] != tile.k || inv != tile.invocations {
				t.Errorf("%s: %s builds a %d×%d tile, K step %d, %d invocations; coopTiles says %d×%d, %d, %d",
					tile.name, file, m, n, d["BK"], inv, tile.m, tile.n, tile.k, tile.invocations)
			}
			if tile.sharedBytes() > 48*1024 {
				t.Errorf("%s: %d bytes of shared memory, over 48 KiB", tile.name, tile.sharedBytes())
			}
		}
	}
	// gemm_cm2.comp's builds (build_glslang.txt): the tile's BM, BN, BK
	// and invocations, and the K steps a trip its name says ("u8": 8).
	glslang, err := os.ReadFile("shaders/build_glslang.txt")
	must(t, err)
	for _, line := range strings.Split(string(glslang), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(line, "#") {
			flags[f[0]] = f[2:]
		}
	}
	for _, tile := range cm2Tiles() {
		for _, h := range []string{"bf16", "fp16"} {
			file := tile.spirv(h)
			fl, ok := flags[file]
			if !ok {
				t.Errorf("%s: %s not in build_glslang.txt", tile.name, file)
				continue
			}
			d := map[string]uint32{"UNROLL": 1}
			for _, x := range fl {
				if k, v, ok := strings.Cut(strings.TrimPrefix(x, "-D"), "="); ok && strings.HasPrefix(x, "-D") {
					n, err := strconv.Atoi(v)
					must(t, err)
					d[k] = uint32(n)
				}
			}
			unroll := uint32(1)
			if strings.HasSuffix(tile.name, "u8") {
				unroll = 8
			}
			if d["BM"] != tile.m || d["BN"] != tile.n || d["BK"] != tile.k || d["NT"] != tile.invocations || d["UNROLL"] != unroll {
				t.Errorf("%s: %s builds BM %d, BN %d, BK %d, NT %d, UNROLL %d; cm2Tiles says %d×%d, K step %d, %d invocations, %d steps a trip",
					tile.name, file, d["BM"], d["BN"], d["BK"], d["NT"], d["UNROLL"], tile.m, tile.n, tile.k, tile.invocations, unroll)
			}
		}
	}
}

// TestGemmOperandsFallBack: where the device has no tensor-core variant,
// a product with 16-bit operands runs on the fp32 kernel, to the bit.
func TestGemmOperandsFallBack(t *testing.T) {
	e, ks := openKernels(t)
	if _, ok := ks.GemmVariantFor(RoundFP16); ok {
		t.Skip("the device has an fp16 tensor-core GEMM (TestGemmTensorCores checks it)")
	}
	d := e.dev
	const m, n, k = 37, 29, 45
	vals := make([]float32, m*k+k*n)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range vals {
		vals[i] = amp.FP16.FromBits16(amp.FP16.Bits16(float32(rng.NormFloat64())))
	}
	A, err := d.NewBuffer(4 * len(vals))
	must(t, err)
	defer A.Free()
	must(t, A.WriteFloat32(0, vals))
	var out [2][]float32
	for i, f := range []Rounding{NoRounding, RoundFP16} {
		C, err := d.NewBuffer(4 * m * n)
		must(t, err)
		defer C.Free()
		r, err := d.NewRecorder()
		must(t, err)
		defer r.Close()
		must(t, ks.Gemm(r, GemmArgs{M: m, N: n, K: k, Alpha: 1, A: A, B: A, BOff: m * k, C: C, Lda: k, Ldb: n, Ldc: n, Operands: f}))
		must(t, r.Submit())
		out[i] = make([]float32, m*n)
		must(t, C.ReadFloat32(0, out[i]))
	}
	for i := range out[0] {
		if math.Float32bits(out[0][i]) != math.Float32bits(out[1][i]) {
			t.Fatalf("C[%d]: fp16 operands give %g, fp32 %g: not the fp32 kernel", i, out[1][i], out[0][i])
		}
	}
}

// TestChooseGemmFor: a tensor-core variant is chosen only where the device
// lists the shape it was compiled for and has the features it needs.
func TestChooseGemmFor(t *testing.T) {
	fp16 := CoopMatShape{M: 16, N: 16, K: 16, A: ComponentFP16, B: ComponentFP16, C: ComponentFP32, Result: ComponentFP32, Scope: 3}
	h200 := func() *PhysicalDevice {
		return &PhysicalDevice{Name: "H200-like", core12: true, VulkanMemoryModel: true, CoopMatNVFeature: true, ShaderFloat16: true,
			SubgroupSize: 32, MaxSharedMemory: 49152, MaxWorkgroupInvocations: 1024, CoopMatShapes: []CoopMatShape{fp16}}
	}
	for _, tc := range []struct {
		name string
		edit func(*PhysicalDevice)
		want string
	}{
		{"all there", func(*PhysicalDevice) {}, "coopmat-nv-fp16-" + defaultCoopTile},
		{"16x8x16 only", func(p *PhysicalDevice) { p.CoopMatShapes[0].N = 8 }, "scalar-tiled-64x64"},
		{"fp16 accumulation only", func(p *PhysicalDevice) {
			p.CoopMatShapes[0].C, p.CoopMatShapes[0].Result = ComponentFP16, ComponentFP16
		}, "scalar-tiled-64x64"},
		{"listed by KHR, not NV", func(p *PhysicalDevice) { p.CoopMatShapes[0].KHR = true }, "scalar-tiled-64x64"},
		{"workgroup scope", func(p *PhysicalDevice) { p.CoopMatShapes[0].Scope = 2 }, "scalar-tiled-64x64"},
		{"subgroups of 64", func(p *PhysicalDevice) { p.SubgroupSize = 64 }, "scalar-tiled-64x64"},
		{"no shaderFloat16", func(p *PhysicalDevice) { p.ShaderFloat16 = false }, "scalar-tiled-64x64"},
		{"no memory model", func(p *PhysicalDevice) { p.VulkanMemoryModel = false }, "scalar-tiled-64x64"},
		{"Vulkan 1.1", func(p *PhysicalDevice) { p.core12 = false }, "scalar-tiled-64x64"},
		{"16 KiB shared memory", func(p *PhysicalDevice) { p.MaxSharedMemory = 16384 }, "scalar-tiled-64x64"},
		// Tiles the device cannot hold are passed over for one it can.
		{"32 KiB shared memory", func(p *PhysicalDevice) { p.MaxSharedMemory = 32768 }, "coopmat-nv-fp16-128x256"},
	} {
		p := h200()
		tc.edit(p)
		got := "scalar-tiled-64x64"
		if v, err := ChooseGemmFor(p, RoundFP16); err == nil {
			got = v.Name
		}
		if got != tc.want {
			t.Errorf("%s: fp16 operands get %s, want %s", tc.name, got, tc.want)
		}
		if v, err := ChooseGemm(p); err != nil || v.Name != "scalar-tiled-64x64" {
			t.Errorf("%s: fp32 operands get %v (%v), want the scalar kernel", tc.name, v.Name, err)
		}
		if v, err := ChooseGemmFor(p, RoundBF16); err == nil && tc.name != "all there" {
			t.Errorf("%s: bf16 operands get %s without a bf16 shape", tc.name, v.Name)
		}
	}
}

// TestChooseGemmForBF16: the bf16 tensor-core variant needs
// VK_KHR_cooperative_matrix listing the bf16 shape and
// VK_KHR_shader_bfloat16's bf16 cooperative matrices; fp16 and fp32
// operands are unaffected by it.
func TestChooseGemmForBF16(t *testing.T) {
	bf16 := CoopMatShape{M: 16, N: 16, K: 16, A: ComponentBF16, B: ComponentBF16, C: ComponentFP32, Result: ComponentFP32, Scope: 3, KHR: true}
	for _, tc := range []struct {
		name string
		edit func(*PhysicalDevice)
		want string
	}{
		{"all there", func(*PhysicalDevice) {}, "coopmat-khr-bf16-" + defaultCoopTile},
		{"no bf16 cooperative matrices", func(p *PhysicalDevice) { p.BFloat16CoopMat = false }, ""},
		{"no KHR feature", func(p *PhysicalDevice) { p.CoopMatKHRFeature = false }, ""},
		{"listed by NV", func(p *PhysicalDevice) { p.CoopMatShapes[0].KHR = false }, ""},
		{"fp16 shape only", func(p *PhysicalDevice) { p.CoopMatShapes[0].A, p.CoopMatShapes[0].B = ComponentFP16, ComponentFP16 }, ""},
	} {
		p := &PhysicalDevice{Name: "bf16-like", core12: true, VulkanMemoryModel: true, CoopMatKHRFeature: true, BFloat16CoopMat: true,
			SubgroupSize: 32, MaxSharedMemory: 49152, MaxWorkgroupInvocations: 1024, CoopMatShapes: []CoopMatShape{bf16}}
		tc.edit(p)
		got := ""
		if v, err := ChooseGemmFor(p, RoundBF16); err == nil {
			got = v.Name
		}
		if got != tc.want {
			t.Errorf("%s: bf16 operands get %q, want %q", tc.name, got, tc.want)
		}
		if v, err := ChooseGemmFor(p, RoundFP16); err == nil {
			t.Errorf("%s: fp16 operands get %s without an fp16 shape", tc.name, v.Name)
		}
	}
}

// TestChooseCoopMat2: the coopmat2 variants (gemm_cm2.comp) run where
// the device has Vulkan 1.3, VK_NV_cooperative_matrix2's workgroup
// scope, flexible dimensions, tensor addressing and per-element
// operations, VK_KHR_cooperative_matrix, the format's type and a listed
// workgroup-scope shape for 256 invocations whose granularities divide
// the tile; NewKernels tries cm2-128x256 first where it runs
// (tensorChoices), and their 16-bit B must lie on 16 bytes.
func TestChooseCoopMat2(t *testing.T) {
	shape := func(c ComponentType) CoopMat2Shape {
		return CoopMat2Shape{MGranularity: 16, NGranularity: 16, KGranularity: 16, A: c, B: c, C: ComponentFP32, Result: ComponentFP32,
			Scope: 2, WorkgroupInvocations: 256}
	}
	h100 := func() *PhysicalDevice {
		return &PhysicalDevice{Name: "H100-like", core12: true, core13: true, VulkanMemoryModel: true, ShaderFloat16: true, BFloat16CoopMat: true,
			CooperativeMatrixKHR: true, CoopMatKHRFeature: true, CooperativeMatrix2NV: true,
			SubgroupSize: 32, MaxSharedMemory: 49152, MaxWorkgroupInvocations: 1024,
			CoopMat2: CoopMat2Support{WorkgroupScope: true, FlexibleDimensions: true, TensorAddressing: true, PerElementOperations: true,
				MaxWorkgroupSize: 256, MaxDimension: 1024, ReservedSharedMemory: 1024,
				Shapes: []CoopMat2Shape{shape(ComponentFP16), shape(ComponentBF16)}}}
	}
	for _, tc := range []struct {
		name       string
		edit       func(*PhysicalDevice)
		fp16, bf16 bool // whether cm2-128x256 runs for each format
	}{
		{"all there", func(*PhysicalDevice) {}, true, true},
		{"Vulkan 1.2", func(p *PhysicalDevice) { p.core13 = false }, false, false},
		{"no extension", func(p *PhysicalDevice) { p.CooperativeMatrix2NV = false }, false, false},
		{"no VK_KHR_cooperative_matrix", func(p *PhysicalDevice) { p.CoopMatKHRFeature = false }, false, false},
		{"no workgroup scope", func(p *PhysicalDevice) { p.CoopMat2.WorkgroupScope = false }, false, false},
		{"no flexible dimensions", func(p *PhysicalDevice) { p.CoopMat2.FlexibleDimensions = false }, false, false},
		{"no tensor addressing", func(p *PhysicalDevice) { p.CoopMat2.TensorAddressing = false }, false, false},
		{"no per-element operations", func(p *PhysicalDevice) { p.CoopMat2.PerElementOperations = false }, false, false},
		{"workgroups of 128 at most", func(p *PhysicalDevice) { p.CoopMat2.MaxWorkgroupSize = 128 }, false, false},
		{"dimensions up to 64", func(p *PhysicalDevice) { p.CoopMat2.MaxDimension = 64 }, false, false},
		{"shapes for 128 invocations", func(p *PhysicalDevice) {
			p.CoopMat2.Shapes[0].WorkgroupInvocations, p.CoopMat2.Shapes[1].WorkgroupInvocations = 128, 128
		}, false, false},
		{"K granularity 48", func(p *PhysicalDevice) { p.CoopMat2.Shapes[1].KGranularity = 48 }, true, false},
		{"subgroup scope listed", func(p *PhysicalDevice) { p.CoopMat2.Shapes[0].Scope = 3 }, false, true},
		{"fp16 accumulation", func(p *PhysicalDevice) { p.CoopMat2.Shapes[0].Result = ComponentFP16 }, false, true},
		{"no bf16 matrices", func(p *PhysicalDevice) { p.BFloat16CoopMat = false }, true, false},
		{"no shaderFloat16", func(p *PhysicalDevice) { p.ShaderFloat16 = false }, false, true},
		{"reserves more shared memory than there is", func(p *PhysicalDevice) { p.CoopMat2.ReservedSharedMemory = 65536 }, false, false},
	} {
		p := h100()
		tc.edit(p)
		for _, f := range []struct {
			r    Rounding
			h    string
			want bool
		}{{RoundFP16, "fp16", tc.fp16}, {RoundBF16, "bf16", tc.bf16}} {
			v, err := chooseTensor(p, f.r, "cm2-128x256")
			if got := err == nil; got != f.want {
				t.Errorf("%s: %s on cm2-128x256: runs %v, want %v (%v)", tc.name, f.h, got, f.want, err)
				continue
			}
			if err == nil && (v.Name != "coopmat2-nv-"+f.h+"-128x256" || v.A16 == "" || v.F32 != "" || v.B16 != "" || !v.Aligned16) {
				t.Errorf("%s: %s on cm2-128x256 is %+v", tc.name, f.h, v)
			}
			// Not ChooseGemmFor's (coopmat1) pick: without the
			// subgroup-scope shapes the format has none.
			if v, err := ChooseGemmFor(p, f.r); err == nil {
				t.Errorf("%s: %s operands: ChooseGemmFor took %s", tc.name, f.h, v.Name)
			}
			// With no tile named, NewKernels tries cm2-128x256 alone
			// here (no coopmat1 variant runs), where it runs.
			vs, err := tensorChoices(p, f.r, "")
			if got := err == nil; got != f.want || (err == nil && (len(vs) != 1 || vs[0].Name != "coopmat2-nv-"+f.h+"-128x256")) {
				t.Errorf("%s: %s operands, no tile named: tries %v (%v), want cm2-128x256 alone: %v", tc.name, f.h, names(vs), err, f.want)
			}
			if got := p.tensorAny(f.r); got != f.want {
				t.Errorf("%s: tensorAny(%s) = %v, want %v (OpenDevice enables the features by it)", tc.name, f.h, got, f.want)
			}
		}
		if got := p.cm2Any(); got != (tc.fp16 || tc.bf16) {
			t.Errorf("%s: cm2Any() = %v", tc.name, got)
		}
	}
	// A 16-bit B off 16 bytes goes to the fp32 variant.
	ks := &Kernels{gemm: map[Rounding]gemmKernels{
		NoRounding: {v: GemmVariant{Name: "fp32"}},
		RoundBF16:  {v: GemmVariant{Name: "cm2", Aligned16: true, Operands: RoundBF16}},
	}}
	for _, tc := range []struct {
		bOff int
		want string
	}{{0, "cm2"}, {8, "cm2"}, {4, "fp32"}, {3, "fp32"}} {
		g := GemmArgs{Operands: RoundBF16, B16: true, BHalf: BF16, BOff: tc.bOff}
		if got := ks.gemmFor(g).v.Name; got != tc.want {
			t.Errorf("16-bit B at offset %d runs on %s, want %s", tc.bOff, got, tc.want)
		}
	}
	if got := ks.gemmFor(GemmArgs{Operands: RoundBF16, BOff: 3}).v.Name; got != "cm2" {
		t.Errorf("fp32 B at offset 3 (narrowed first) runs on %s, want cm2", got)
	}
}

func names(vs []GemmVariant) []string {
	var s []string
	for _, v := range vs {
		s = append(s, v.Name)
	}
	return s
}

// TestTensorChoices: with no tile named, NewKernels tries the coopmat2
// tile before the coopmat1 one where the device runs both, each alone
// where it runs alone, a named tile alone; the first that builds and
// passes its self-check is taken, and those passed over are reported.
// bothDevice reports every tensor-core variant: coopmat1 and coopmat2,
// fp16 and bf16.
func bothDevice() *PhysicalDevice {
	p := &PhysicalDevice{Name: "both", core12: true, core13: true, VulkanMemoryModel: true, ShaderFloat16: true, BFloat16CoopMat: true,
		CooperativeMatrixKHR: true, CoopMatKHRFeature: true, CoopMatNVFeature: true, CooperativeMatrix2NV: true,
		SubgroupSize: 32, MaxSharedMemory: 49152, MaxWorkgroupInvocations: 1024,
		CoopMatShapes: []CoopMatShape{
			{M: 16, N: 16, K: 16, A: ComponentFP16, B: ComponentFP16, C: ComponentFP32, Result: ComponentFP32, Scope: 3},
			{M: 16, N: 16, K: 16, A: ComponentBF16, B: ComponentBF16, C: ComponentFP32, Result: ComponentFP32, Scope: 3, KHR: true},
		},
		CoopMat2: CoopMat2Support{WorkgroupScope: true, FlexibleDimensions: true, TensorAddressing: true, PerElementOperations: true,
			MaxWorkgroupSize: 256, MaxDimension: 1024, ReservedSharedMemory: 1024}}
	for _, c := range []ComponentType{ComponentFP16, ComponentBF16} {
		p.CoopMat2.Shapes = append(p.CoopMat2.Shapes, CoopMat2Shape{MGranularity: 16, NGranularity: 16, KGranularity: 16,
			A: c, B: c, C: ComponentFP32, Result: ComponentFP32, Scope: 2, WorkgroupInvocations: 256})
	}
	return p
}

func TestTensorChoices(t *testing.T) {
	both := bothDevice
	for _, tc := range []struct {
		name string
		edit func(*PhysicalDevice)
		tile string
		want map[string][]string // by format
	}{
		{"both run", func(*PhysicalDevice) {}, "", map[string][]string{
			"fp16": {"coopmat2-nv-fp16-128x256", "coopmat-nv-fp16-" + defaultCoopTile},
			"bf16": {"coopmat2-nv-bf16-128x256", "coopmat-khr-bf16-" + defaultCoopTile}}},
		{"no coopmat2", func(p *PhysicalDevice) { p.CooperativeMatrix2NV = false }, "", map[string][]string{
			"fp16": {"coopmat-nv-fp16-" + defaultCoopTile}, "bf16": {"coopmat-khr-bf16-" + defaultCoopTile}}},
		{"coopmat1 named", func(*PhysicalDevice) {}, defaultCoopTile, map[string][]string{
			"fp16": {"coopmat-nv-fp16-" + defaultCoopTile}, "bf16": {"coopmat-khr-bf16-" + defaultCoopTile}}},
		{"cm2-128x128 named", func(*PhysicalDevice) {}, "cm2-128x128", map[string][]string{
			"fp16": {"coopmat2-nv-fp16-128x128"}, "bf16": {"coopmat2-nv-bf16-128x128"}}},
		{"neither", func(p *PhysicalDevice) { p.CooperativeMatrix2NV, p.CoopMatShapes = false, nil }, "", map[string][]string{}},
	} {
		p := both()
		tc.edit(p)
		for _, f := range []struct {
			r Rounding
			h string
		}{{RoundFP16, "fp16"}, {RoundBF16, "bf16"}} {
			vs, err := tensorChoices(p, f.r, tc.tile)
			want := tc.want[f.h]
			if (err == nil) != (len(want) > 0) || !slices.Equal(names(vs), want) {
				t.Errorf("%s: %s: tries %v (%v), want %v", tc.name, f.h, names(vs), err, want)
			}
		}
	}

	// firstBuilt: the first that builds, those before it passed over.
	vs := []GemmVariant{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	for _, tc := range []struct {
		fail       map[string]bool
		got        string
		passedOver int
	}{
		{map[string]bool{}, "a", 0},
		{map[string]bool{"a": true}, "b", 1},
		{map[string]bool{"a": true, "b": true}, "c", 2},
		{map[string]bool{"a": true, "b": true, "c": true}, "", 3},
	} {
		var tried []string
		g, passed, err := firstBuilt(vs, func(v GemmVariant) (gemmKernels, error) {
			tried = append(tried, v.Name)
			if tc.fail[v.Name] {
				return gemmKernels{}, errors.New("self-check failed")
			}
			return gemmKernels{v: v}, nil
		})
		if tc.got == "" {
			if err == nil || passed != nil || strings.Count(err.Error(), "self-check failed") != 3 || !strings.Contains(err.Error(), "a: ") {
				t.Errorf("all fail: %v, %v, %v", g.v.Name, passed, err)
			}
			continue
		}
		if err != nil || g.v.Name != tc.got || len(passed) != tc.passedOver || len(tried) != tc.passedOver+1 {
			t.Errorf("failing %v: took %q, passed over %v, tried %v (%v)", tc.fail, g.v.Name, passed, tried, err)
		}
	}
}

// TestGemmB16 checks the GEMM that reads B as bf16 or fp16 bits against
// the float64 product of the widened values, within the same bound.
func TestGemmB16(t *testing.T) {
	e, ks := openKernels(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, h := range []Half{BF16, FP16} {
		for _, s := range [][3]int{{5, 3, 9}, {65, 63, 33}, {128, 128, 128}} {
			for _, tr := range [][2]bool{{false, false}, {true, true}, {false, true}} {
				c := gemmCase{m: s[0], n: s[1], k: s[2], transA: tr[0], transB: tr[1], alpha: 1, b16: true, half: h}
				if s[0]%2 == 1 { // odd offsets put elements in the high halves of words
					c.alpha, c.beta, c.pad, c.off = 2, 0.5, 1, 3
				}
				t.Run(c.String(), func(t *testing.T) { c.run(t, ks, e.dev, rng) })
			}
		}
	}
}

// TestGemmBetaZeroIgnoresC: with β = 0, NaN in C does not leak into the
// result (C is not read), as in BLAS.
func TestGemmBetaZeroIgnoresC(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const n = 9
	A, err := d.NewBuffer(4 * n * n)
	must(t, err)
	defer A.Free()
	C, err := d.NewBuffer(4 * n * n)
	must(t, err)
	defer C.Free()
	ones, nans := make([]float32, n*n), make([]float32, n*n)
	for i := range ones {
		ones[i], nans[i] = 1, float32(math.NaN())
	}
	must(t, A.WriteFloat32(0, ones))
	must(t, C.WriteFloat32(0, nans))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	must(t, ks.Gemm(r, GemmArgs{M: n, N: n, K: n, Alpha: 1, A: A, B: A, C: C, Lda: n, Ldb: n, Ldc: n}))
	must(t, r.Submit())
	got := make([]float32, n*n)
	must(t, C.ReadFloat32(0, got))
	for i, v := range got {
		if v != n {
			t.Fatalf("C[%d] = %g, want %d", i, v, n)
		}
	}
}

// TestBatchedDispatches records a chain of GEMMs where each reads the one
// before's output in one submission: the recorder's barriers order them.
func TestBatchedDispatches(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const n, steps = 16, 12
	bufs := make([]*Buffer, steps+1)
	for i := range bufs {
		b, err := d.NewBuffer(4 * n * n)
		must(t, err)
		defer b.Free()
		bufs[i] = b
	}
	// x_{i+1} = 2·I·x_i: x_steps = 2^steps·x_0, exactly.
	eye := make([]float32, n*n)
	for i := range n {
		eye[i*n+i] = 1
	}
	I, err := d.NewBuffer(4 * n * n)
	must(t, err)
	defer I.Free()
	must(t, I.WriteFloat32(0, eye))
	x0 := make([]float32, n*n)
	for i := range x0 {
		x0[i] = float32(i) - 100
	}
	must(t, bufs[0].WriteFloat32(0, x0))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for i := range steps {
		must(t, ks.Gemm(r, GemmArgs{M: n, N: n, K: n, Alpha: 2, A: I, B: bufs[i], C: bufs[i+1], Lda: n, Ldb: n, Ldc: n}))
	}
	if r.Len() != steps {
		t.Fatalf("recorder holds %d commands, want %d", r.Len(), steps)
	}
	must(t, r.Submit())
	got := make([]float32, n*n)
	must(t, bufs[steps].ReadFloat32(0, got))
	for i, v := range got {
		if want := x0[i] * (1 << steps); v != want {
			t.Fatalf("after %d chained GEMMs x[%d] = %g, want %g", steps, i, v, want)
		}
	}
	// A second batch on the same recorder, after the reset.
	must(t, ks.Gemm(r, GemmArgs{M: n, N: n, K: n, Alpha: 0.5, A: I, B: bufs[steps], C: bufs[0], Lda: n, Ldb: n, Ldc: n}))
	must(t, r.Submit())
	must(t, bufs[0].ReadFloat32(0, got))
	if want := x0[3] * (1 << (steps - 1)); got[3] != want {
		t.Fatalf("second batch: x[3] = %g, want %g", got[3], want)
	}
}

func BenchmarkGemm(b *testing.B) {
	e, ks := openKernels(b)
	d := e.dev
	for _, s := range []struct {
		n   int
		b16 bool
	}{{64, false}, {128, false}, {256, false}, {256, true}} {
		name := fmt.Sprintf("%d^3_fp32", s.n)
		if s.b16 {
			name = fmt.Sprintf("%d^3_bf16B", s.n)
		}
		b.Run(name, func(b *testing.B) {
			A, err := d.NewBuffer(4 * s.n * s.n)
			must(b, err)
			defer A.Free()
			B, err := d.NewBuffer(4 * s.n * s.n)
			must(b, err)
			defer B.Free()
			C, err := d.NewBuffer(4 * s.n * s.n)
			must(b, err)
			defer C.Free()
			r, err := d.NewRecorder()
			must(b, err)
			defer r.Close()
			// One pass over K: the kernel itself (BenchmarkGemmSplitK times split-K).
			benchGemm(b, ks, r, GemmArgs{M: s.n, N: s.n, K: s.n, Alpha: 1, A: A, B: B, C: C, Lda: s.n, Ldb: s.n, Ldc: s.n, B16: s.b16, Splits: 1})
		})
	}
}

// benchGemm times g, a batch of its own on r per product, after one
// untimed run (the driver compiles the pipelines on first use), and
// reports GFLOP/s.
func benchGemm(b *testing.B, ks *Kernels, r *Recorder, g GemmArgs) {
	must(b, ks.Gemm(r, g))
	must(b, r.Submit())
	b.ResetTimer()
	for b.Loop() {
		must(b, ks.Gemm(r, g))
		must(b, r.Submit())
	}
	b.ReportMetric(2*float64(g.M)*float64(g.N)*float64(g.K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// TestTensorCoreSelfCheck: the check NewKernels runs on a tensor-core
// variant before using it passes the emulated coopmat kernels (the same
// source, its fragments emulated) and refuses a planted fault (a kernel
// reading a 16-bit B as float32), leaving ks.gemm as it was.
func TestTensorCoreSelfCheck(t *testing.T) {
	_, ks := openKernels(t)
	var good gemmKernels
	for _, tile := range emulatedTiles(t, ks.d.Physical) {
		good = gemmKernels{v: GemmVariant{Name: "emulated coopmat fp16 " + tile.name, Tile: tile.name, Operands: RoundFP16, Workgroup: [2]uint32{tile.m, tile.n}}}
		var err error
		good.f32, err = ks.kernel(tile.spirv("fp16", "f32", true), 3, gemmPush)
		must(t, err)
		good.b16, err = ks.kernel(tile.spirv("fp16", "b16", true), 3, gemmPush)
		must(t, err)
		if err := ks.selfCheck(RoundFP16, good); err != nil {
			t.Fatalf("%s: %v", good.v.Name, err)
		}
	}
	bad := good
	bad.v.Name = "b16 read as f32"
	bad.b16 = good.f32
	err := ks.selfCheck(RoundFP16, bad)
	if err == nil || !strings.Contains(err.Error(), "self-check of b16 read as f32") {
		t.Fatalf("a kernel reading 16-bit B as float32: %v, want a self-check failure", err)
	}
	if _, ok := ks.gemm[RoundFP16]; ok {
		t.Fatal("selfCheck left its variant in ks.gemm")
	}
}

// TestChooseTensorTile: KernelOptions.CoopTile picks the named tile where
// the device holds it, ChooseGemmFor's choice for "", and an error naming the tile
// where it does not fit (its products then stay in fp32, and the banner
// says why); a name that is no tile is refused by NewKernelsWith.
// KernelOptions.TensorFormats builds the tensor-core kernels of the
// formats it names (nil: all), ScalarGEMM none.
func TestKernelOptionsTensorFormats(t *testing.T) {
	for _, tc := range []struct {
		o          KernelOptions
		fp16, bf16 bool
	}{
		{KernelOptions{}, true, true},
		{KernelOptions{TensorFormats: []Rounding{RoundBF16}}, false, true},
		{KernelOptions{TensorFormats: []Rounding{RoundFP16}}, true, false},
		{KernelOptions{TensorFormats: []Rounding{}}, false, false},
		{KernelOptions{ScalarGEMM: true}, false, false},
		{KernelOptions{ScalarGEMM: true, TensorFormats: []Rounding{RoundBF16}}, false, false},
	} {
		if fp16, bf16 := tc.o.buildsTensor(RoundFP16), tc.o.buildsTensor(RoundBF16); fp16 != tc.fp16 || bf16 != tc.bf16 {
			t.Errorf("%+v: builds fp16 %v, bf16 %v; want %v, %v", tc.o, fp16, bf16, tc.fp16, tc.bf16)
		}
	}
}

func TestChooseTensorTile(t *testing.T) {
	fp16 := CoopMatShape{M: 16, N: 16, K: 16, A: ComponentFP16, B: ComponentFP16, C: ComponentFP32, Result: ComponentFP32, Scope: 3}
	dev := func(shared, invocations uint32) *PhysicalDevice {
		return &PhysicalDevice{Name: "H100-like", core12: true, VulkanMemoryModel: true, CoopMatNVFeature: true, ShaderFloat16: true,
			SubgroupSize: 32, MaxSharedMemory: shared, MaxWorkgroupInvocations: invocations, CoopMatShapes: []CoopMatShape{fp16}}
	}
	if names := CoopTileNames(); len(names) != len(coopTiles())+len(cm2Tiles()) || names[0] != defaultCoopTile {
		t.Fatalf("CoopTileNames() = %v: want every tile, %s first", names, defaultCoopTile)
	}
	// each tensor-core variant names its coopTile or cm2Tile (the scalar
	// one none), the tile its name ends in and its workgroup computes
	tiles := map[string][2]uint32{}
	for _, tile := range coopTiles() {
		tiles[tile.name] = [2]uint32{tile.m, tile.n}
	}
	for _, tile := range cm2Tiles() {
		tiles[tile.name] = [2]uint32{tile.m, tile.n}
	}
	for _, v := range GemmVariants() {
		wg, ok := tiles[v.Tile]
		switch {
		case v.Operands == NoRounding && v.Tile != "":
			t.Errorf("%s: the scalar variant has Tile %q, want none", v.Name, v.Tile)
		case v.Operands != NoRounding && (!ok || !strings.HasSuffix(v.Name, "-"+strings.TrimPrefix(v.Tile, "cm2-")) || v.Workgroup != wg):
			t.Errorf("%s: Tile %q, workgroup %v: not one tile's", v.Name, v.Tile, v.Workgroup)
		}
	}
	// shared memory: 128x256 29,184 B, 256x128 33,280 B, 128x128 and
	// 128x128s4 37,888 B; invocations: 128x128s4 128, the others 256
	for _, tc := range []struct {
		tile                string
		shared, invocations uint32
		want                string // variant name, or the error's text
	}{
		{"", 49152, 1024, "coopmat-nv-fp16-128x256"},
		{"128x128", 49152, 1024, "coopmat-nv-fp16-128x128"},
		{"128x256", 49152, 1024, "coopmat-nv-fp16-128x256"},
		{"256x128", 49152, 1024, "coopmat-nv-fp16-256x128"},
		{"128x128s4", 49152, 1024, "coopmat-nv-fp16-128x128s4"},
		{"", 32768, 1024, "coopmat-nv-fp16-128x256"},
		{"", 49152, 128, "coopmat-nv-fp16-128x128s4"}, // the default does not fit: the first that does
		{"128x128", 32768, 1024, "no fp16 GEMM variant of tile 128x128 runs on H100-like"},
		{"256x128", 32768, 1024, "no fp16 GEMM variant of tile 256x128 runs on H100-like"},
		{"", 16384, 1024, "no fp16 GEMM variant runs on H100-like"},
	} {
		got := ""
		v, err := chooseTensor(dev(tc.shared, tc.invocations), RoundFP16, tc.tile)
		if err != nil {
			got = err.Error()
		} else {
			got = v.Name
			if tc.tile != "" && v.Tile != tc.tile {
				t.Errorf("tile %q: chose %s, whose Tile is %q", tc.tile, v.Name, v.Tile)
			}
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("tile %q, %d B of shared memory, %d invocations: got %q, want %q", tc.tile, tc.shared, tc.invocations, got, tc.want)
		}
	}
	e, _ := openKernels(t)
	if _, err := NewKernelsWith(e.dev, KernelOptions{CoopTile: "64x64"}); err == nil || !strings.Contains(err.Error(), `no tensor-core tile "64x64" (tiles: 128x256, 128x128, 128x128s4, 256x128, cm2-128x256, cm2-128x128, cm2-128x256u8, cm2-256x128u8)`) {
		t.Errorf("CoopTile 64x64: err %v", err)
	}
}

// TestGemmNarrow16 runs Gemm's narrowing path (KernelOptions.Narrow16:
// fp32 operands narrowed once into scratch, then the A16 build) on the
// emulated 128×256 tile, both formats, every transpose, fp32 and 16-bit
// B, aligned and misaligned offsets and leading dimensions, K = 0 and
// ragged edges: within the float64 bound like every tensor-core product,
// and bit for bit the C of the default build (16-bit B), because the
// same 16-bit values reach the same fragments in the same order.
func TestGemmNarrow16(t *testing.T) {
	e, ks := openKernels(t)
	defer func() { delete(ks.gemm, RoundFP16); delete(ks.gemm, RoundBF16) }()
	var tile coopTile
	for _, tl := range emulatedTiles(t, ks.d.Physical) {
		if tl.name == "128x256" {
			tile = tl
		}
	}
	if tile.name == "" {
		t.Skip("the 128x256 tile is left out on this device (see emulatedTiles)")
	}
	type shape struct {
		m, n, k     int
		alpha, beta float32
		pad, off    int
	}
	shapes := []shape{
		{3, 5, 7, 1, 0, 0, 0},
		{5, 9, 0, 1, 0.5, 1, 3},          // K = 0: C = β·C, nothing narrowed
		{127, 129, 33, 1.5, -0.75, 3, 5}, // ragged, misaligned
		{132, 264, 40, 1.25, 0, 4, 8},    // aligned: 16-byte loads, C from the fragments
		{132, 264, 40, -0.5, 0.75, 3, 6}, // misaligned, β ≠ 0
	}
	if testing.Short() {
		shapes = []shape{shapes[1], shapes[2], shapes[3]}
	}
	for _, f := range []struct {
		r Rounding
		h Half
		s string
	}{{RoundFP16, FP16, "fp16"}, {RoundBF16, BF16, "bf16"}} {
		v := GemmVariant{Name: "emulated coopmat " + f.s, Tile: tile.name, Operands: f.r, Workgroup: [2]uint32{tile.m, tile.n}}
		plain, narrowed := gemmKernels{v: v}, gemmKernels{v: v}
		var err error
		plain.b16, err = ks.kernel(tile.spirv(f.s, "b16", true), 3, gemmPush)
		must(t, err)
		narrowed.a16, err = ks.kernel(tile.spirv(f.s, "a16", true), 3, gemmPush)
		must(t, err)
		worst := 0.0
		for i, s := range shapes {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				seed := uint64(100*i) + uint64(b01(tr[0])) + 2*uint64(b01(tr[1]))
				var want, got []float32
				c := gemmCase{m: s.m, n: s.n, k: s.k, transA: tr[0], transB: tr[1], alpha: s.alpha, beta: s.beta,
					pad: s.pad, off: s.off, operands: f.r, b16: true, half: f.h, splits: 1, out: &want}
				ks.gemm[f.r] = plain
				t.Run(f.s+"/plain/"+c.String(), func(t *testing.T) { c.run(t, ks, e.dev, rand.New(rand.NewPCG(seed, 7))) })
				ks.gemm[f.r] = narrowed
				for _, b16 := range []bool{true, false} {
					c.b16, c.out = b16, &got
					t.Run(f.s+"/narrowed/"+c.String(), func(t *testing.T) {
						worst = max(worst, c.run(t, ks, e.dev, rand.New(rand.NewPCG(seed, 7))))
						if len(got) != len(want) {
							t.Fatalf("%d values of C, the default build left %d", len(got), len(want))
						}
						for j := range got {
							if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
								t.Fatalf("C element %d: %g narrowed first, %g on the default build (bits %08x, %08x)", j, got[j], want[j], math.Float32bits(got[j]), math.Float32bits(want[j]))
							}
						}
					})
				}
			}
		}
		t.Logf("%s: worst error %.3f of the bound", f.s, worst)
	}
	// The on-device self-check runs an A16 build through the narrowing
	// path too (fp32 and 16-bit B), and fails one that reads the wrong
	// format: fp16 bits taken for bf16.
	if testing.Short() {
		return
	}
	fp16a16, err := ks.kernel(tile.spirv("fp16", "a16", true), 3, gemmPush)
	must(t, err)
	bf16a16, err := ks.kernel(tile.spirv("bf16", "a16", true), 3, gemmPush)
	must(t, err)
	bf := GemmVariant{Name: "emulated coopmat bf16", Tile: tile.name, Operands: RoundBF16, Workgroup: [2]uint32{tile.m, tile.n}}
	if err := ks.selfCheck(RoundBF16, gemmKernels{v: bf, a16: bf16a16}); err != nil {
		t.Errorf("self-check of the bf16 A16 build: %v", err)
	}
	if err := ks.selfCheck(RoundBF16, gemmKernels{v: bf, a16: fp16a16}); err == nil {
		t.Errorf("self-check passed an fp16 A16 build taking bf16 products")
	}
	narrow, err := NewKernelsWith(e.dev, KernelOptions{Narrow16: true})
	must(t, err)
	defer narrow.Close()
	if got := narrow.GemmNames(); !strings.HasSuffix(got, ", operands narrowed first") {
		t.Errorf("GemmNames() with Narrow16 = %q, want it to end \", operands narrowed first\"", got)
	}
}

// TestTunableTiles: the tiles auto times are those whose variant runs on
// the device, the default coopmat2 tile first, then ChooseGemmFor's, then
// the rest in GemmVariants' order (a tie goes to the earlier).
func TestTunableTiles(t *testing.T) {
	rest := []string{"128x128s4", "128x128", "256x128"}
	for _, tc := range []struct {
		name string
		edit func(*PhysicalDevice)
		want []string
	}{
		{"both", func(*PhysicalDevice) {}, append(append([]string{"cm2-128x256", defaultCoopTile}, rest...), "cm2-128x128", "cm2-128x256u8", "cm2-256x128u8")},
		{"no coopmat2", func(p *PhysicalDevice) { p.CooperativeMatrix2NV = false }, append([]string{defaultCoopTile}, rest...)},
		{"30,000 bytes of shared memory", func(p *PhysicalDevice) { p.CooperativeMatrix2NV, p.MaxSharedMemory = false, 30000 }, []string{defaultCoopTile}},
		{"neither", func(p *PhysicalDevice) { p.CooperativeMatrix2NV, p.CoopMatShapes = false, nil }, nil},
	} {
		p := bothDevice()
		tc.edit(p)
		for _, f := range []Rounding{RoundFP16, RoundBF16} {
			if got := tunableTiles(p, f); !slices.Equal(got, tc.want) {
				t.Errorf("%s: %v: %v, want %v", tc.name, f, got, tc.want)
			}
		}
	}
}
