package blas

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/internal/cpufeat"
)

// nativeAMX returns the AMX kernel, skipping the test where the CPU
// cannot run it.
func nativeAMX(t *testing.T, workers int) *NativeBF16 {
	t.Helper()
	f := cpufeat.Detect()
	nb, err := NewNativeBF16(f, workers)
	if err != nil || nb.micro.mr != amxMR {
		t.Skipf("CPU features %q: the AMX kernel's tests run on a CPU with AMX-BF16 that the OS grants (grep amx_bf16 /proc/cpuinfo; Linux 5.16+)", f)
	}
	return nb
}

// gemmAMXModel is NativeBF16.GemmBF16 on the AMX kernel computed with the
// model, without the driver: each element of C summed from zero, one
// TDPBF16PS per 16 pairs along k in order (zeros pad k to a multiple of
// 32), then alpha·sum + beta·C. The AMX kernel must give its bits.
func gemmAMXModel(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	kp := (k + 1) / 2
	pair := func(x []uint16, trans bool, ld, r, p int) uint32 {
		var v uint32
		if 2*p < k {
			v = uint32(opAt(x, trans, ld, r, 2*p))
		}
		if 2*p+1 < k {
			v |= uint32(opAt(x, trans, ld, r, 2*p+1)) << 16
		}
		return v
	}
	var ap, bp [amxKStep]uint32
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc float32
			for p0 := 0; p0 < kp; p0 += amxKStep {
				for p := range ap {
					ap[p] = pair(a, transA, lda, i, p0+p)
					bp[p] = pair(b, !transB, ldb, j, p0+p)
				}
				acc = tdpbf16psModel(acc, ap[:], bp[:])
			}
			c[i*ldc+j] = scaleBF16Sum(alpha, beta, acc, c[i*ldc+j])
		}
	}
}

// bigFMA is one step of TDPBF16PS computed with math/big: acc + x·y
// rounded once to 24 bits (nearest even, unbounded exponent), then
// flushed below 2^-126, with denormal inputs read as zero.
func bigFMA(acc float32, x, y float64) float32 {
	p := new(big.Float).SetPrec(0).SetMode(big.ToNearestEven)
	p.Mul(big.NewFloat(x), big.NewFloat(y))
	s := new(big.Float).SetPrec(24).SetMode(big.ToNearestEven)
	s.Add(big.NewFloat(f32DAZ(acc)), p)
	r, _ := s.Float64()
	if math.Abs(r) < 0x1p-126 {
		return float32(math.Copysign(0, r))
	}
	return float32(r)
}

// bigTDPBF16PS is the SDM's pseudocode for one element with math/big
// arithmetic: an implementation of the semantics independent of
// tdpbf16psModel's float64 one.
func bigTDPBF16PS(c float32, a, b []uint32) float32 {
	var even, odd float32
	for p := range a {
		even = bigFMA(even, bf16DAZ(uint16(a[p])), bf16DAZ(uint16(b[p])))
		odd = bigFMA(odd, bf16DAZ(uint16(a[p]>>16)), bf16DAZ(uint16(b[p]>>16)))
	}
	return bigFMA(c, 1, f32DAZ(bigFMA(even, 1, f32DAZ(odd))))
}

// TestTDPBF16PSModelRoundsOnce holds the model to math/big on random
// elements whose products and accumulators span tiny to huge, so that
// results round, flush to zero and cancel.
func TestTDPBF16PSModelRoundsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	for trial := 0; trial < 20000; trial++ {
		a, b := make([]uint32, amxKStep), make([]uint32, amxKStep)
		for p := range a {
			a[p] = uint32(randBF16(rng, -70, 60)) | uint32(randBF16(rng, -70, 60))<<16
			b[p] = uint32(randBF16(rng, -70, 60)) | uint32(randBF16(rng, -70, 60))<<16
		}
		c := math.Float32frombits(uint32(randBF16(rng, -126, 120))<<16 | uint32(rng.IntN(1<<16)))
		if trial%4 == 0 { // C near the sum, for cancellation
			c = -bigTDPBF16PS(0, a, b)
		}
		got, want := tdpbf16psModel(c, a, b), bigTDPBF16PS(c, a, b)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("c %v, a %#08x, b %#08x: model %v (%#08x), math/big %v (%#08x)", c, a, b, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}

// TestTDPBF16PSModelCases pins the semantics the SDM's pseudocode states,
// each with a case that tells it from the alternatives.
func TestTDPBF16PSModelCases(t *testing.T) {
	bf := func(x float32) uint16 { return uint16(math.Float32bits(x) >> 16) }
	pair := func(lo, hi uint16) uint32 { return uint32(lo) | uint32(hi)<<16 }
	for _, tc := range []struct {
		name string
		c    float32
		a, b []uint32
		want float32
	}{
		// the even chain holds 1, the odd one 2^-24 + 2^-24 = 2^-23, and
		// their sum 1 + 2^-23 is exact; one chain over the products in
		// order, or each pair rounded into C, adds 2^-24 to 1 twice (a
		// tie each time, to 1)
		{"two chains, each rounded", 0,
			[]uint32{pair(bf(1), 0), pair(0, bf(0x1p-12)), pair(0, bf(0x1p-12))},
			[]uint32{pair(bf(1), 0), pair(0, bf(0x1p-12)), pair(0, bf(0x1p-12))}, 1 + 0x1p-23},
		// even = 1, odd = 2^-24: their sum a tie, rounded to 1 before C
		// = 1 + ... is formed; adding the chains to C one by one would
		// also give 1, but C = -1 shows the pair rounded first: 0, not
		// 2^-24
		{"the pair rounded before C", -1,
			[]uint32{pair(bf(1), bf(0x1p-12))}, []uint32{pair(bf(1), bf(0x1p-12))}, 0},
		{"denormal input read as zero", 0, []uint32{pair(0x0040, 0)}, []uint32{pair(bf(0x1p24), 0)}, 0},
		{"denormal C read as zero", math.Float32frombits(1), []uint32{0}, []uint32{0}, 0},
		{"denormal chain flushed", 0, []uint32{pair(bf(0x1p-70), 0)}, []uint32{pair(bf(0x1p-70), 0)}, 0},
		{"smallest normal kept", 0, []uint32{pair(bf(0x1p-63), 0)}, []uint32{pair(bf(0x1p-63), 0)}, 0x1p-126},
		{"overflow to infinity", math.MaxFloat32, []uint32{pair(bf(0x1p104), 0)}, []uint32{pair(bf(0x1p100), 0)}, float32(math.Inf(1))},
	} {
		if got := tdpbf16psModel(tc.c, tc.a, tc.b); math.Float32bits(got) != math.Float32bits(tc.want) {
			t.Errorf("%s: model gives %v (%#08x), want %v (%#08x)", tc.name, got, math.Float32bits(got), tc.want, math.Float32bits(tc.want))
		}
	}
}

// TestAMXModelGemmAccuracy holds the AMX model's GEMM, the reference of
// the AMX kernel, to the float32 accumulation bound γ_k·Σ|a||b| of a
// float64 product (no product's path through the chains, the pair sum
// and C takes more than k roundings), in every transpose and at training
// depths; it runs on every machine.
func TestAMXModelGemmAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(83, 84))
	worst := map[string]float64{}
	for _, k := range []int{1, 2, 3, 31, 33, 576, 1536, 5632} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				c := newAccuracyCase(rng, 9, 35, k, ta, tb)
				got := make([]float32, c.m*c.n)
				gemmAMXModel(ta, tb, c.m, c.n, k, 1, c.au, c.lda, c.bu, c.ldb, 0, got, c.n)
				c.check(t, "AMX model", got, worst)
			}
		}
	}
	t.Logf("worst error / γ_k bound: k=576 %.3g, k=5632 %.3g", worst["AMX model k=576"], worst["AMX model k=5632"])
}

// Other readings of TDPBF16PS's description than the SDM's pseudocode,
// for the hardware test's diagnosis only (the products in float64, exact
// but where two of them lie more than 2^37 apart).
var tdpbf16psReadings = []struct {
	name string
	f    func(c float32, a, b []uint32) float32
}{
	{"each pair summed exactly, rounded once into C", func(c float32, a, b []uint32) float32 {
		for p := range a {
			c = roundFTZ(f32DAZ(c) + bf16DAZ(uint16(a[p]))*bf16DAZ(uint16(b[p])) + bf16DAZ(uint16(a[p]>>16))*bf16DAZ(uint16(b[p]>>16)))
		}
		return c
	}},
	{"each pair summed and rounded, then added to C", func(c float32, a, b []uint32) float32 {
		for p := range a {
			s := roundFTZ(bf16DAZ(uint16(a[p]))*bf16DAZ(uint16(b[p])) + bf16DAZ(uint16(a[p]>>16))*bf16DAZ(uint16(b[p]>>16)))
			c = roundFTZ(f32DAZ(c) + f32DAZ(s))
		}
		return c
	}},
	{"VDPBF16PS pair by pair (odd element first)", func(c float32, a, b []uint32) float32 {
		for p := range a {
			c = vdpbf16psModel(c, a[p], b[p])
		}
		return c
	}},
}

// TestTDPBF16PSMatchesModel runs the instruction itself on random tiles
// (normal, denormal, tiny and huge values, infinities and NaNs) and holds
// each element to the model of the SDM's pseudocode, bit for bit (any
// NaN for a NaN). It logs how many elements each other reading
// (tdpbf16psReadings) misses, so that a mismatch says which semantics the
// hardware has instead.
func TestTDPBF16PSMatchesModel(t *testing.T) {
	nativeAMX(t, 1)
	rng := rand.New(rand.NewPCG(85, 86))
	special := []uint16{0x7f80, 0xff80, 0x7fc0, 0x0000, 0x8000, 0x0001, 0x807f}
	draw := func(lo, hi int) uint16 {
		if rng.IntN(40) == 0 {
			return special[rng.IntN(len(special))]
		}
		return randBF16(rng, lo, hi)
	}
	same := func(g, w float32) bool { return math.Float32bits(g) == math.Float32bits(w) || g != g && w != w }
	misses := make([]int, len(tdpbf16psReadings))
	modelMisses, elements := 0, 0
	first := ""
	for trial := 0; trial < 400; trial++ {
		lo, hi := -80, 70
		if trial%2 == 0 { // narrow exponents: sums round, chains matter
			lo, hi = -4, 4
		}
		var c, got [256]float32
		var a, b [256]uint32
		for i := range c {
			c[i] = math.Float32frombits(uint32(randBF16(rng, lo, hi))<<16 | uint32(rng.IntN(1<<16)))
			a[i] = uint32(draw(lo, hi)) | uint32(draw(lo, hi))<<16
			b[i] = uint32(draw(lo, hi)) | uint32(draw(lo, hi))<<16
		}
		got = c
		tdpbf16psOnce(&got, &a, &b)
		var col [16]uint32
		for m := 0; m < 16; m++ {
			for n := 0; n < 16; n++ {
				for p := range col {
					col[p] = b[p*16+n]
				}
				row, c0, g := a[m*16:m*16+16], c[m*16+n], got[m*16+n]
				elements++
				for i, r := range tdpbf16psReadings {
					if !same(g, r.f(c0, row, col[:])) {
						misses[i]++
					}
				}
				if w := tdpbf16psModel(c0, row, col[:]); !same(g, w) {
					modelMisses++
					if first == "" {
						first = fmt.Sprintf("trial %d, C[%d][%d] = %v (%#08x): TDPBF16PS gives %v (%#08x), the model %v (%#08x)\nA row %#08x\nB column %#08x",
							trial, m, n, c0, math.Float32bits(c0), g, math.Float32bits(g), w, math.Float32bits(w), row, col)
					}
				}
			}
		}
	}
	t.Logf("of %d elements, the SDM pseudocode's model misses %d", elements, modelMisses)
	for i, r := range tdpbf16psReadings {
		t.Logf("of %d elements, the reading %q misses %d", elements, r.name, misses[i])
	}
	if modelMisses > 0 {
		t.Errorf("TDPBF16PS differs from the model of the SDM's pseudocode in %d of %d elements; the first: %s", modelMisses, elements, first)
	}
}

// TestNativeAMXKernel holds the AMX kernel to its model bit for bit and to
// the float32 accumulation bound of a float64 product, in every
// transpose, k from 1 to 5632, partial tiles, alpha and beta, and one or
// three workers (the same bits).
func TestNativeAMXKernel(t *testing.T) {
	one, three := nativeAMX(t, 1), nativeAMX(t, 3)
	t.Log(one.Name())
	checkKernelAgainstModel(t, one, three, gemmAMXModel)
}

// TestNativeBF16Dispatch: the features alone choose the kernel, AMX first
// where the OS grants it, and a CPU or OS without AMX never gets the AMX
// kernel (nothing is executed: these features need not be this CPU's).
func TestNativeBF16Dispatch(t *testing.T) {
	for _, tc := range []struct {
		f    cpufeat.Features
		want string // "AMX", "VDPBF16PS" or "" (an error)
	}{
		{cpufeat.Features{}, ""},
		{cpufeat.Features{AVX512F: true}, ""},
		{cpufeat.Features{AVX512F: true, AMXBF16: true}, ""}, // not granted, no AVX512_BF16
		{cpufeat.Features{AVX512F: true, AVX512BF16: true}, "VDPBF16PS"},
		{cpufeat.Features{AVX512F: true, AVX512BF16: true, AMXBF16: true}, "VDPBF16PS"}, // not granted
		{cpufeat.Features{AVX512F: true, AVX512BF16: true, AMXBF16: true, AMXPermitted: true}, "AMX"},
		{cpufeat.Features{AVX512F: true, AMXBF16: true, AMXPermitted: true}, "AMX"},
		{cpufeat.Features{AMXBF16: true, AMXPermitted: true}, ""}, // no AVX-512F for the epilogue
	} {
		nb, err := NewNativeBF16(tc.f, 2)
		got := ""
		switch {
		case err != nil && !haveBF16Kernel && tc.f.AVX512BF16: // the CPU has it, but no kernel is built (purego, not amd64): the error says so
			if !strings.Contains(err.Error(), "not built") {
				t.Errorf("%+v: error %q does not say the kernel is not built", tc.f, err)
			}
		case err != nil:
			if !strings.Contains(err.Error(), "AMX-BF16") || !strings.Contains(err.Error(), "AVX512_BF16") {
				t.Errorf("%+v: error %q does not name AMX-BF16 and AVX512_BF16", tc.f, err)
			}
			if tc.f.AMXBF16 && !tc.f.AMXPermitted && !strings.Contains(err.Error(), "did not grant") {
				t.Errorf("%+v: error %q does not say the OS withheld AMX", tc.f, err)
			}
		case nb.micro.mr == amxMR:
			got = "AMX"
		default:
			got = "VDPBF16PS"
		}
		if !haveAMXKernel && got == "AMX" || !haveBF16Kernel && got != "" {
			t.Fatalf("%+v: %s kernel chosen where it is not built", tc.f, got)
		}
		if !haveBF16Kernel {
			continue
		}
		if got != tc.want {
			t.Errorf("%+v: got kernel %q (err %v), want %q", tc.f, got, err, tc.want)
		}
		if got != "" && !strings.Contains(nb.Name(), map[string]string{"AMX": "AMX-BF16", "VDPBF16PS": "VDPBF16PS"}[got]) {
			t.Errorf("%+v: Name() = %q does not say %s", tc.f, nb.Name(), got)
		}
	}
}

// TestNativeAMXPackedB: op(B) packed for one kernel is refused by the
// other (the pair counts differ), with a message naming both.
func TestNativeAMXPackedB(t *testing.T) {
	amx, vdp := NewNativeAMXGo(1), NewNativeBF16Go(1)
	b := make([]float32, 20*3)
	pb := vdp.PackB(nil, false, 20, 3, BF16Matrix{F32: b, Ld: 3})
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "another kernel") {
			t.Fatalf("a VDPBF16PS-packed B on the AMX driver: recovered %v, want a panic naming another kernel", r)
		}
	}()
	amx.Gemm(false, false, 2, 3, 20, 1, BF16Matrix{F32: make([]float32, 40), Ld: 20}, BF16Matrix{}, pb, 0, make([]float32, 6), 3, nil)
}

// amxInstr is one instruction of native_amx_amd64.s: its bytes and the
// Intel syntax in its comment.
type amxInstr struct {
	bytes []byte
	intel string
}

// encodedAMX reads the BYTE lines of native_amx_amd64.s with a comment.
func encodedAMX(t *testing.T) []amxInstr {
	t.Helper()
	src, err := os.ReadFile("native_amx_amd64.s")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%v: run the test in blas/ (a test binary copied elsewhere has no source beside it)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\s*((?:BYTE \$0x[0-9A-Fa-f]{2};?\s*)+)// (.+?)\s*$`)
	byteRE := regexp.MustCompile(`\$0x([0-9A-Fa-f]{2})`)
	var out []amxInstr
	for _, l := range strings.Split(string(src), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			if strings.Contains(l, "BYTE") {
				t.Fatalf("native_amx_amd64.s: unparsed BYTE line %q", l)
			}
			continue
		}
		var e amxInstr
		for _, h := range byteRE.FindAllStringSubmatch(m[1], -1) {
			v, _ := strconv.ParseUint(h[1], 16, 8)
			e.bytes = append(e.bytes, byte(v))
		}
		e.intel = m[2]
		out = append(out, e)
	}
	return out
}

// gpr64 numbers the registers the kernel addresses through (no REX/VEX
// extension bit: rax..rdi).
var gpr64 = map[string]int{"rax": 0, "rcx": 1, "rdx": 2, "rbx": 3, "rsp": 4, "rbp": 5, "rsi": 6, "rdi": 7}

// encodeAMX encodes one AMX instruction from its Intel syntax, for the
// forms the kernel uses (VEX.128.0F38.W0, three-byte VEX, registers
// rax..rdi, tmm0..tmm7): C4, then R̄X̄B̄ and map 00010 (0F38) = E2, then W
// v̄v̄v̄v̄ L pp, the opcode and ModRM (and SIB and a displacement for
// [base+index*1+disp]).
func encodeAMX(intel string) ([]byte, error) {
	tmm := func(s string) (int, error) {
		if !strings.HasPrefix(s, "tmm") {
			return 0, fmt.Errorf("%q is not a tile register", s)
		}
		return strconv.Atoi(s[3:])
	}
	vex := func(vvvv, pp int, op byte) []byte { return []byte{0xc4, 0xe2, byte(^vvvv&0xf)<<3 | byte(pp), op} }
	mem := func(reg int, s string) ([]byte, error) { // ModRM, SIB, disp for [base+index*1(+disp)]
		m := regexp.MustCompile(`^\[(\w+)\+(\w+)\*1(?:\+0x([0-9a-f]+))?\]$`).FindStringSubmatch(s)
		if m == nil {
			if m = regexp.MustCompile(`^\[(\w+)\]$`).FindStringSubmatch(s); m == nil {
				return nil, fmt.Errorf("unsupported operand %q", s)
			}
			base := gpr64[m[1]]
			return []byte{byte(reg<<3 | base)}, nil
		}
		base, index := gpr64[m[1]], gpr64[m[2]]
		disp := int64(0)
		if m[3] != "" {
			disp, _ = strconv.ParseInt(m[3], 16, 64)
		}
		sib := byte(index<<3 | base)
		switch {
		case disp == 0:
			return []byte{byte(reg<<3 | 4), sib}, nil
		case disp < 128:
			return []byte{byte(0x40 | reg<<3 | 4), sib, byte(disp)}, nil
		default:
			d := uint32(disp)
			return []byte{byte(0x80 | reg<<3 | 4), sib, byte(d), byte(d >> 8), byte(d >> 16), byte(d >> 24)}, nil
		}
	}
	const np, f3, f2 = 0, 2, 3
	op, rest, _ := strings.Cut(intel, " ")
	args := strings.Split(rest, ", ")
	switch {
	case op == "tilerelease":
		return append(vex(0, np, 0x49), 0xc0), nil
	case op == "ldtilecfg" && len(args) == 1:
		m, err := mem(0, args[0])
		return append(vex(0, np, 0x49), m...), err
	case op == "tilezero" && len(args) == 1:
		r, err := tmm(args[0])
		return append(vex(0, f2, 0x49), byte(0xc0|r<<3)), err
	case op == "tileloadd" && len(args) == 2:
		r, err := tmm(args[0])
		if err != nil {
			return nil, err
		}
		m, err := mem(r, args[1])
		return append(vex(0, f2, 0x4b), m...), err
	case op == "tilestored" && len(args) == 2:
		r, err := tmm(args[1])
		if err != nil {
			return nil, err
		}
		m, err := mem(r, args[0])
		return append(vex(0, f3, 0x4b), m...), err
	case op == "tdpbf16ps" && len(args) == 3:
		var r [3]int
		for i, a := range args {
			var err error
			if r[i], err = tmm(a); err != nil {
				return nil, err
			}
		}
		return append(vex(r[2], f3, 0x5c), byte(0xc0|r[0]<<3|r[1])), nil
	}
	return nil, fmt.Errorf("unsupported instruction %q", intel)
}

// TestAMXEncoding checks every AMX instruction written as bytes in the
// kernel (LDTILECFG, TILEZERO, TILELOADD, TDPBF16PS, TILESTORED,
// TILERELEASE) against the encoder above and, where GNU as is installed,
// against what as assembles from the Intel-syntax comment; and the
// encoder against as over every tile register in every position.
func TestAMXEncoding(t *testing.T) {
	ins := encodedAMX(t)
	count := map[string]int{}
	for _, e := range ins {
		op, _, _ := strings.Cut(e.intel, " ")
		count[op]++
		want, err := encodeAMX(e.intel)
		if err != nil {
			t.Fatalf("native_amx_amd64.s: %v", err)
		}
		if !bytes.Equal(e.bytes, want) {
			t.Errorf("%s: bytes % x in the .s file, encoder gives % x", e.intel, e.bytes, want)
		}
	}
	// the kernel and tdpbf16psOnce: 2 configs and releases, 4 zeros, 8+3
	// loads, 4+1 products, 4+1 stores
	wantCount := map[string]int{"ldtilecfg": 2, "tilerelease": 2, "tilezero": 4, "tileloadd": 11, "tdpbf16ps": 5, "tilestored": 5}
	for op, n := range wantCount {
		if count[op] != n {
			t.Errorf("native_amx_amd64.s has %d %s, want %d", count[op], op, n)
		}
	}
	var text strings.Builder
	var want [][]byte
	add := func(intel string) {
		b, err := encodeAMX(intel)
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(intel + "\n")
		want = append(want, b)
	}
	add("tilerelease")
	for _, base := range []string{"rax", "rcx", "rsi", "rdi"} {
		add("ldtilecfg [" + base + "]")
	}
	for r := 0; r < 8; r++ {
		add(fmt.Sprintf("tilezero tmm%d", r))
		add(fmt.Sprintf("tileloadd tmm%d, [rsi+rdx*1]", r))
		add(fmt.Sprintf("tileloadd tmm%d, [rbx+rcx*1+0x40]", r))
		add(fmt.Sprintf("tileloadd tmm%d, [rdi+rax*1+0x840]", r))
		add(fmt.Sprintf("tilestored [rbx+rcx*1+0x800], tmm%d", r))
		add(fmt.Sprintf("tilestored [rax+rdx*1], tmm%d", r))
		add(fmt.Sprintf("tdpbf16ps tmm%d, tmm%d, tmm%d", r, (r+3)%8, (r+5)%8))
		add(fmt.Sprintf("tdpbf16ps tmm%d, tmm%d, tmm%d", (r+1)%8, r, (r+6)%8))
		add(fmt.Sprintf("tdpbf16ps tmm%d, tmm%d, tmm%d", (r+2)%8, (r+7)%8, r))
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
