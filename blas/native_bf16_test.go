package blas

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/cpufeat"
)

// nativeBF16 returns the VDPBF16PS kernel (on an AMX CPU too), skipping
// the test where the CPU cannot run it.
func nativeBF16(t *testing.T, workers int) *NativeBF16 {
	t.Helper()
	f := cpufeat.Detect()
	f.AMXPermitted = false // AMX would displace it
	nb, err := NewNativeBF16(f, workers)
	if err != nil {
		t.Skipf("%v: the VDPBF16PS kernel's tests run on a CPU with avx512_bf16 (grep avx512_bf16 /proc/cpuinfo)", err)
	}
	return nb
}

// encodeVDPBF16PS is the EVEX encoding of VDPBF16PS zmm(dst), zmm(src1),
// zmm(src2) (EVEX.512.F3.0F38.W0 52 /r, register operands): 62, then P0
// = R X B R' 0 0 m m with R, X, B, R' inverted (mm = 10: 0F38; X extends
// the ModRM.rm register to 32 registers), P1 = W vvvv 1 pp (vvvv = src1
// inverted, pp = 10: F3), P2 = z L'L b V' aaa (L'L = 10: 512 bits, V' =
// src1's bit 4 inverted), the opcode 52 and ModRM = 11 reg rm.
func encodeVDPBF16PS(dst, src1, src2 int) []byte {
	inv := func(r, bit int) byte { return byte(^(r >> bit) & 1) }
	p0 := inv(dst, 3)<<7 | inv(src2, 4)<<6 | inv(src2, 3)<<5 | inv(dst, 4)<<4 | 0b10
	p1 := byte(^src1&0xf)<<3 | 1<<2 | 0b10
	p2 := byte(0b10)<<5 | inv(src1, 4)<<3
	return []byte{0x62, p0, p1, p2, 0x52, 0xc0 | byte(dst&7)<<3 | byte(src2&7)}
}

// asmVDPBF16PS is one encoded VDPBF16PS in native_bf16_amd64.s.
type asmVDPBF16PS struct {
	bytes           []byte
	intel           string // "vdpbf16ps zmm0, zmm16, zmm18"
	dst, src1, src2 int
}

// encodedVDPBF16PS reads the BYTE lines of native_bf16_amd64.s that end in
// a "// vdpbf16ps zmmD, zmmS1, zmmS2" comment.
func encodedVDPBF16PS(t *testing.T) []asmVDPBF16PS {
	t.Helper()
	src, err := os.ReadFile("native_bf16_amd64.s")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%v: run the test in blas/ (a test binary copied elsewhere has no source beside it)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\s*((?:BYTE \$0x[0-9A-Fa-f]{2};?\s*)+)// (vdpbf16ps zmm(\d+), zmm(\d+), zmm(\d+))\s*$`)
	byteRE := regexp.MustCompile(`\$0x([0-9A-Fa-f]{2})`)
	var out []asmVDPBF16PS
	for _, l := range strings.Split(string(src), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			if strings.Contains(l, "vdpbf16ps zmm") && strings.Contains(l, "BYTE") {
				t.Fatalf("native_bf16_amd64.s: unparsed VDPBF16PS line %q", l)
			}
			continue
		}
		var e asmVDPBF16PS
		for _, h := range byteRE.FindAllStringSubmatch(m[1], -1) {
			v, _ := strconv.ParseUint(h[1], 16, 8)
			e.bytes = append(e.bytes, byte(v))
		}
		e.intel = m[2]
		e.dst, _ = strconv.Atoi(m[3])
		e.src1, _ = strconv.Atoi(m[4])
		e.src2, _ = strconv.Atoi(m[5])
		out = append(out, e)
	}
	return out
}

// TestVDPBF16PSEncoding checks every VDPBF16PS written as bytes in the
// kernel against the encoder above and, where GNU as and objdump are
// installed, against what as assembles from the Intel-syntax comment.
func TestVDPBF16PSEncoding(t *testing.T) {
	ins := encodedVDPBF16PS(t)
	if len(ins) != 29 { // 28 in the 14×32 kernel, 1 in dpbf16Once
		t.Fatalf("found %d encoded VDPBF16PS in native_bf16_amd64.s, want 29", len(ins))
	}
	for _, e := range ins {
		if want := encodeVDPBF16PS(e.dst, e.src1, e.src2); !bytes.Equal(e.bytes, want) {
			t.Errorf("%s: bytes % x in the .s file, encoder gives % x", e.intel, e.bytes, want)
		}
	}
	// the encoder against GNU as over every register in every position
	var text strings.Builder
	var want [][]byte
	for r := 0; r < 32; r++ {
		for _, ops := range [][3]int{{r, (r + 7) % 32, (r + 19) % 32}, {(r + 3) % 32, r, (r + 11) % 32}, {(r + 5) % 32, (r + 13) % 32, r}} {
			fmt.Fprintf(&text, "vdpbf16ps zmm%d, zmm%d, zmm%d\n", ops[0], ops[1], ops[2])
			want = append(want, encodeVDPBF16PS(ops[0], ops[1], ops[2]))
		}
	}
	for _, e := range ins {
		text.WriteString(e.intel + "\n")
		want = append(want, e.bytes)
	}
	got := gnuAssemble(t, text.String())
	if got == nil {
		return
	}
	if !bytes.Equal(got, bytes.Join(want, nil)) {
		t.Fatalf("GNU as assembles\n% x\nthe encoder and the .s file give\n% x", got, bytes.Join(want, nil))
	}
}

// gnuAssemble assembles Intel-syntax lines with GNU as and returns the
// .text bytes (objcopy); nil, logged, where the tools are missing.
func gnuAssemble(t *testing.T, text string) []byte {
	t.Helper()
	for _, tool := range []string{"as", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Logf("%s not installed: the encoding was checked against the encoder only (GNU as checks it where binutils is installed)", tool)
			return nil
		}
	}
	dir := t.TempDir()
	src, obj, bin := filepath.Join(dir, "x.s"), filepath.Join(dir, "x.o"), filepath.Join(dir, "x.bin")
	if err := os.WriteFile(src, []byte(".intel_syntax noprefix\n"+text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("as", "--64", "-o", obj, src).CombinedOutput(); err != nil {
		t.Skipf("as cannot assemble VDPBF16PS (binutils before 2.33?): %v: %s", err, out)
	}
	if out, err := exec.Command("objcopy", "-O", "binary", "-j", ".text", obj, bin).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v: %s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVDPBF16PSMatchesModel runs the instruction itself on random lanes
// (normal, denormal, tiny and huge values, infinities and NaNs) and holds
// each lane to the model of the SDM's pseudocode, bit for bit (any NaN
// for a NaN).
func TestVDPBF16PSMatchesModel(t *testing.T) {
	nativeBF16(t, 1)
	rng := rand.New(rand.NewPCG(31, 32))
	special := []uint16{0x7f80, 0xff80, 0x7fc0, 0x0000, 0x8000, 0x0001, 0x807f}
	draw := func() uint16 {
		if rng.IntN(20) == 0 {
			return special[rng.IntN(len(special))]
		}
		return randBF16(rng, -80, 70)
	}
	for trial := 0; trial < 20000; trial++ {
		var acc, want [16]float32
		var a, b [16]uint32
		for j := range acc {
			acc[j] = math.Float32frombits(uint32(randBF16(rng, -126, 120))<<16 | uint32(rng.IntN(1<<16)))
			a[j] = uint32(draw()) | uint32(draw())<<16
			b[j] = uint32(draw()) | uint32(draw())<<16
			if trial%4 == 0 {
				acc[j] = float32(-bf16DAZ(uint16(a[j]>>16)) * bf16DAZ(uint16(b[j]>>16)))
			}
			want[j] = vdpbf16psModel(acc[j], a[j], b[j])
		}
		got := acc
		dpbf16Once(&got, &a, &b) // src1 = a, src2 = b
		for j := range got {
			g, w := got[j], want[j]
			if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
				t.Fatalf("lane %d: acc %v (%#08x), a %#08x, b %#08x: VDPBF16PS gives %v (%#08x), the model %v (%#08x)",
					j, acc[j], math.Float32bits(acc[j]), a[j], b[j], g, math.Float32bits(g), w, math.Float32bits(w))
			}
		}
	}
}

// TestNativeBF16Kernel holds the VDPBF16PS kernel to its model bit for
// bit and to the float32 accumulation bound γ_k·Σ|a||b| of a float64
// product, in every transpose, k from 1 to 5632, partial tiles, alpha and
// beta, and one or three workers (the same bits).
func TestNativeBF16Kernel(t *testing.T) {
	one, three := nativeBF16(t, 1), nativeBF16(t, 3)
	checkKernelAgainstModel(t, one, three, gemmBF16Model)
}

// gemmModel is a kernel's reference: gemmBF16Model or gemmAMXModel.
type gemmModel func(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int)

// checkKernelAgainstModel holds the kernel of one and three (one and
// three workers) to the model ref bit for bit and to the float32
// accumulation bound of a float64 product, in every transpose, k from 1
// to 5632, partial tiles, alpha and beta.
func checkKernelAgainstModel(t *testing.T, one, three *NativeBF16, ref gemmModel) {
	t.Helper()
	rng := rand.New(rand.NewPCG(41, 42))
	worst := map[string]float64{}
	for _, k := range []int{1, 2, 3, 4, 31, 64, 577, 1536, 5632} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				c := newAccuracyCase(rng, 37, 53, k, ta, tb)
				got := make([]float32, c.m*c.n)
				one.GemmBF16(ta, tb, c.m, c.n, k, 1, c.au, c.lda, c.bu, c.ldb, 0, got, c.n)
				c.check(t, "NativeBF16", got, worst)
				want := make([]float32, c.m*c.n)
				ref(ta, tb, c.m, c.n, k, 1, c.au, c.lda, c.bu, c.ldb, 0, want, c.n)
				par := make([]float32, c.m*c.n)
				three.GemmBF16(ta, tb, c.m, c.n, k, 1, c.au, c.lda, c.bu, c.ldb, 0, par, c.n)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(par[i]) != math.Float32bits(want[i]) {
						t.Fatalf("k=%d tA=%v tB=%v: C[%d] = %v (1 worker), %v (3), the model %v", k, ta, tb, i, got[i], par[i], want[i])
					}
				}
				// alpha and beta, as the model applies them
				cg := make([]float32, c.m*c.n)
				cw := make([]float32, c.m*c.n)
				for i := range cg {
					cg[i] = float32(rng.NormFloat64())
					cw[i] = cg[i]
				}
				one.GemmBF16(ta, tb, c.m, c.n, k, 0.5, c.au, c.lda, c.bu, c.ldb, -2, cg, c.n)
				ref(ta, tb, c.m, c.n, k, 0.5, c.au, c.lda, c.bu, c.ldb, -2, cw, c.n)
				for i := range cw {
					if math.Float32bits(cg[i]) != math.Float32bits(cw[i]) {
						t.Fatalf("k=%d tA=%v tB=%v alpha 0.5 beta -2: C[%d] = %v, the model %v", k, ta, tb, i, cg[i], cw[i])
					}
				}
			}
		}
	}
	t.Logf("%s on %s: worst error / γ_k bound: k=577 %.3g, k=5632 %.3g", one.Name(), runtime.GOARCH, worst["NativeBF16 k=577"], worst["NativeBF16 k=5632"])
}

// TestNativeBF16Denormals: bf16 denormal inputs count as zeros, and sums
// below fp32's smallest normal are flushed, as the SDM says, on each
// native kernel this CPU runs (VDPBF16PS, AMX).
func TestNativeBF16Denormals(t *testing.T) {
	f := cpufeat.Detect()
	var kernels []*NativeBF16
	if nb, err := NewNativeBF16(f, 1); err == nil {
		kernels = append(kernels, nb)
	}
	if f.AMX() && f.AVX512BF16 {
		f.AMXPermitted = false
		if nb, err := NewNativeBF16(f, 1); err == nil {
			kernels = append(kernels, nb)
		}
	}
	if len(kernels) == 0 {
		t.Skipf("CPU features %q: the native kernels' tests run on a CPU with avx512_bf16 or AMX-BF16", f)
	}
	for _, nb := range kernels {
		t.Run(nb.Name(), func(t *testing.T) { checkDenormals(t, nb) })
	}
}

// checkDenormals is TestNativeBF16Denormals on one kernel.
func checkDenormals(t *testing.T, nb *NativeBF16) {
	const m, n, k = 9, 33, 7
	rng := rand.New(rand.NewPCG(51, 52))
	a, b := make([]uint16, m*k), make([]uint16, k*n)
	az, bz := make([]uint16, m*k), make([]uint16, k*n) // denormals replaced by zeros
	for i := range a {
		a[i] = randBF16(rng, -3, 3)
		if rng.IntN(3) == 0 {
			a[i] = uint16(rng.IntN(2))<<15 | uint16(1+rng.IntN(127)) // a denormal
		}
		az[i] = a[i]
		if az[i]&0x7f80 == 0 {
			az[i] &= 0x8000
		}
	}
	for i := range b {
		b[i] = randBF16(rng, 100, 126) // denormal·2^126 would be a normal product
		bz[i] = b[i]
	}
	got, want := make([]float32, m*n), make([]float32, m*n)
	nb.GemmBF16(false, false, m, n, k, 1, a, k, b, n, 0, got, n)
	nb.GemmBF16(false, false, m, n, k, 1, az, k, bz, n, 0, want, n)
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("C[%d] = %v with denormal inputs, %v with zeros in their place", i, got[i], want[i])
		}
	}
	// 2^-70 · 2^-70 summed k times stays below 2^-126: every sum flushed
	tiny := uint16(math.Float32bits(0x1p-70) >> 16)
	at, bt := make([]uint16, m*k), make([]uint16, k*n)
	for i := range at {
		at[i] = tiny
	}
	for i := range bt {
		bt[i] = tiny
	}
	nb.GemmBF16(false, false, m, n, k, 1, at, k, bt, n, 0, got, n)
	for i, v := range got {
		if v != 0 {
			t.Fatalf("C[%d] = %v, want 0: 7·2^-140 is below fp32's normals", i, v)
		}
	}
}

// bf16DriverShapes are the driver's cases: partial tiles, one and several k
// slices (kp > bf16KCP), several column blocks (n > bf16NC), few strips
// (column groups), strides wider than the matrices, and thin products
// (n ≤ bf16ThinN, m ≥ 4n) that run transposed.
var bf16DriverShapes = []struct{ m, n, k int }{{1, 1, 1}, {14, 32, 2}, {15, 33, 3}, {17, 70, 31}, {5, 100, 64}, {41, 70, 800}, {3, 1030, 21}, {29, 64, 600}, {32, 32, 32}, {33, 65, 33}, {70, 45, 1100}, {100, 8, 70}, {60, 1, 5}, {57, 14, 600}}

// TestNativeBF16Driver runs NativeBF16's packing, blocking, epilogue and
// worker split with the model in place of the assembly kernel, for the
// VDPBF16PS and the AMX kernel, on every CPU: it must give the model's
// bits (gemmBF16Model, gemmAMXModel) in every transpose, with operands as
// bits or float32 (rounded to bf16 as packed), op(B) packed in advance,
// alpha (with beta 0 and not), one or three workers, and call done on every element of
// C once.
func TestNativeBF16Driver(t *testing.T) {
	for _, kc := range []struct {
		name  string
		micro bf16Micro
		ref   gemmModel
	}{
		{"VDPBF16PS", bf16Micro{mr: bf16MR, kStep: 1, kern: modelKernel, packA: packStripA}, gemmBF16Model},
		{"AMX", NewNativeAMXGo(1).micro, gemmAMXModel},
	} {
		t.Run(kc.name, func(t *testing.T) { checkDriver(t, kc.micro, kc.ref) })
	}
}

// checkDriver is TestNativeBF16Driver for one kernel.
func checkDriver(t *testing.T, micro bf16Micro, ref gemmModel) {
	rng := rand.New(rand.NewPCG(61, 62))
	for _, sh := range bf16DriverShapes {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				m, n, k := sh.m, sh.n, sh.k
				rowsA, colsA := m, k
				if ta {
					rowsA, colsA = k, m
				}
				rowsB, colsB := k, n
				if tb {
					rowsB, colsB = n, k
				}
				lda, ldb, ldc := colsA+3, colsB+1, n+2
				a, _ := bf16Values(rng, rowsA*lda)
				b, _ := bf16Values(rng, rowsB*ldb)
				// A as float32 off the bf16 grid (packing rounds it to a's
				// bits, nearest even), B as float32 on it
				af, bf := make([]float32, len(a)), make([]float32, len(b))
				for i := range af {
					af[i] = math.Float32frombits(uint32(a[i])<<16 | uint32(rng.IntN(1<<16)))
					a[i] = amp.BF16.Bits16(af[i])
				}
				for i := range bf {
					bf[i] = math.Float32frombits(uint32(b[i]) << 16)
				}
				c0 := make([]float32, m*ldc)
				for i := range c0 {
					c0[i] = float32(rng.NormFloat64())
				}
				for _, ab := range [][2]float32{{1, 0}, {-0.75, 0}, {0.5, -2}} {
					want := append([]float32(nil), c0...)
					ref(ta, tb, m, n, k, ab[0], a, lda, b, ldb, ab[1], want, ldc)
					for _, workers := range []int{1, 3} {
						nb := &NativeBF16{workers: workers, micro: micro}
						for _, form := range []string{"bits", "float32", "packed"} {
							got := append([]float32(nil), c0...)
							seen := make([]int, m*n)
							done := func(i0, i1, j0, j1 int) {
								for i := i0; i < i1; i++ {
									for j := j0; j < j1; j++ {
										seen[i*n+j]++
									}
								}
							}
							switch form {
							case "bits":
								nb.Gemm(ta, tb, m, n, k, ab[0], BF16Matrix{Bits: a, Ld: lda}, BF16Matrix{Bits: b, Ld: ldb}, nil, ab[1], got, ldc, done)
							case "float32":
								nb.Gemm(ta, tb, m, n, k, ab[0], BF16Matrix{F32: af, Ld: lda}, BF16Matrix{F32: bf, Ld: ldb}, nil, ab[1], got, ldc, done)
							case "packed":
								pb := nb.PackB(nil, tb, k, n, BF16Matrix{F32: bf, Ld: ldb})
								nb.Gemm(ta, false, m, n, k, ab[0], BF16Matrix{Bits: a, Ld: lda}, BF16Matrix{}, pb, ab[1], got, ldc, done)
							}
							for i := range want {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("%d×%d×%d tA=%v tB=%v alpha %v beta %v, %d workers, %s: C[%d] = %v, the model %v",
										m, n, k, ta, tb, ab[0], ab[1], workers, form, i, got[i], want[i])
								}
							}
							for i, s := range seen {
								if s != 1 {
									t.Fatalf("%d×%d×%d %s: done saw C[%d][%d] %d times, want once", m, n, k, form, i/n, i%n, s)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestNativeBF16Band holds GemmBand to Gemm on attention's four kinds of
// product, with op(A) zero where the band says and every other element
// random: the wanted elements must have Gemm's bits (the skipped products
// are all zero, and the sums here are never exactly zero), and for
// BandLowerC each element above the diagonal must be Gemm's or left as
// it was. Both kernels' models, and the VDPBF16PS kernel where the CPU
// has it; 1 and 3 workers; beta 0 and not; and GemmBandRound, whose wanted
// elements must be GemmBand's rounded as amp rounds.
func TestNativeBF16Band(t *testing.T) {
	micros := []struct {
		name  string
		micro bf16Micro
	}{
		{"VDPBF16PS model", bf16Micro{mr: bf16MR, kStep: 1, kern: modelKernel, packA: packStripA, roundsC: true}},
		{"AMX model", NewNativeAMXGo(1).micro},
	}
	f := cpufeat.Detect()
	f.AMXPermitted = false // the VDPBF16PS kernel, not AMX's
	if nb, err := NewNativeBF16(f, 1); err == nil {
		micros = append(micros, struct {
			name  string
			micro bf16Micro
		}{"VDPBF16PS", nb.micro})
	} else {
		t.Logf("%v: the band is checked on the kernels' models only", err)
	}
	rng := rand.New(rand.NewPCG(63, 64))
	for _, mc := range micros {
		for _, T := range []int{1, 13, 14, 15, 33, 64, 100} {
			for _, inner := range []int{8, 33} {
				for _, band := range []Band{BandLowerC, BandLowerA, BandUpperA} {
					// C is T×T over k = inner (LowerC), else T×inner over k = T
					m, n, k := T, inner, T
					transA := band == BandUpperA
					if band == BandLowerC {
						n, k = T, inner
					}
					rowsA, colsA := m, k
					if transA {
						rowsA, colsA = k, m
					}
					a := make([]float32, rowsA*colsA)
					for r := range rowsA {
						for c := range colsA {
							i, kk := r, c // op(A)[i][kk]
							if transA {
								i, kk = c, r
							}
							if (band == BandLowerA && kk > i) || (band == BandUpperA && kk < i) {
								continue
							}
							a[r*colsA+c] = math.Float32frombits(uint32(amp.BF16Bits(float32(rng.NormFloat64()))) << 16)
						}
					}
					b := make([]float32, k*n)
					for i := range b {
						b[i] = math.Float32frombits(uint32(amp.BF16Bits(float32(rng.NormFloat64()))) << 16)
					}
					c0 := make([]float32, m*n)
					for i := range c0 {
						c0[i] = float32(rng.NormFloat64())
					}
					for _, ab := range [][2]float32{{1, 0}, {-0.75, 0}, {0.5, -2}} {
						for _, workers := range []int{1, 3} {
							nb := &NativeBF16{workers: workers, micro: mc.micro}
							want := append([]float32(nil), c0...)
							nb.Gemm(transA, false, m, n, k, ab[0], BF16Matrix{F32: a, Ld: colsA}, BF16Matrix{F32: b, Ld: n}, nil, ab[1], want, n, nil)
							got := append([]float32(nil), c0...)
							nb.GemmBand(band, transA, false, m, n, k, ab[0], BF16Matrix{F32: a, Ld: colsA}, BF16Matrix{F32: b, Ld: n}, ab[1], got, n)
							for i := range m {
								for j := range n {
									g, w := got[i*n+j], want[i*n+j]
									if band == BandLowerC && j > i {
										if math.Float32bits(g) != math.Float32bits(w) && math.Float32bits(g) != math.Float32bits(c0[i*n+j]) {
											t.Fatalf("%s band %d T=%d inner %d: unwanted C[%d][%d] = %v, neither Gemm's %v nor the old %v", mc.name, band, T, inner, i, j, g, w, c0[i*n+j])
										}
										continue
									}
									if math.Float32bits(g) != math.Float32bits(w) {
										t.Fatalf("%s band %d T=%d inner %d alpha %v beta %v, %d workers: C[%d][%d] = %v, Gemm %v", mc.name, band, T, inner, ab[0], ab[1], workers, i, j, g, w)
									}
								}
							}
							if ab[1] != 0 {
								continue
							}
							// GemmBandRound: the wanted elements, rounded as amp rounds
							rounded := append([]float32(nil), c0...)
							nb.GemmBandRound(band, transA, false, m, n, k, ab[0], BF16Matrix{F32: a, Ld: colsA}, BF16Matrix{F32: b, Ld: n}, rounded, n)
							for i := range m {
								for j := range n {
									if band == BandLowerC && j > i {
										continue
									}
									if g, w := rounded[i*n+j], amp.BF16.Round(want[i*n+j]); math.Float32bits(g) != math.Float32bits(w) {
										t.Fatalf("%s band %d T=%d inner %d alpha %v, %d workers: GemmBandRound C[%d][%d] = %v, Gemm rounded %v", mc.name, band, T, inner, ab[0], workers, i, j, g, w)
									}
								}
							}
						}
					}
				}
			}
		}
	}
}
