package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// linspace32 is torch.linspace in float32: the first half stepped from
// start, the second from end, each value rounded to float32.
func linspace32(start, end float64, steps int) []float64 {
	step := float32((end - start) / float64(steps-1))
	out := make([]float64, steps)
	for i := range out {
		if i < steps/2 {
			out[i] = float64(float32(start) + step*float32(i))
		} else {
			out[i] = float64(float32(end) - step*float32(steps-1-i))
		}
	}
	return out
}

func ppf(p float64) float64 { return math.Sqrt2 * math.Erfinv(2*p-1) }

// TestNF4TableIsNormalMap rebuilds create_normal_map(offset=0.9677083) in
// float64 (8 positive quantiles from linspace(offset, 0.5, 9), 7 negative
// ones from linspace(offset, 0.5, 8), and 0, normalized by the largest).
// Bound: the linspace points are float32 (relative error 6e-8); the
// quantile function's slope at the offset is 1/pdf(1.848) ≈ 13.8, so a
// quantile moves by at most 1e-6 and, over the largest (1.848), a
// normalized value by 6e-7; the table's float32 rounding adds 6e-8.
func TestNF4TableIsNormalMap(t *testing.T) {
	const offset = 0.9677083
	var ref []float64
	for _, p := range linspace32(offset, 0.5, 9)[:8] {
		ref = append(ref, ppf(p))
	}
	for _, p := range linspace32(offset, 0.5, 8)[:7] {
		ref = append(ref, -ppf(p))
	}
	ref = append(ref, 0)
	sort.Float64s(ref)
	top := ref[15]
	published := []float64{-1.0, -0.6961928, -0.5250731, -0.3949175, -0.2844414, -0.1847734, -0.0910500, 0,
		0.0795803, 0.1609302, 0.2461123, 0.3379152, 0.4407098, 0.5626170, 0.7229568, 1.0}
	code := NF4.Code()
	for i := range code {
		if d := math.Abs(float64(code[i]) - ref[i]/top); d > 7e-7 {
			t.Errorf("nf4[%d] = %v, normal map %v (off by %.2g)", i, code[i], ref[i]/top, d)
		}
		if d := math.Abs(float64(code[i]) - published[i]); d > 5e-8 { // 7 printed digits
			t.Errorf("nf4[%d] = %v, published %v", i, code[i], published[i])
		}
	}
}

func TestFP4Table(t *testing.T) {
	want := []float64{0, 0.0625, 8, 12, 4, 6, 2, 3}
	code := FP4.Code()
	for i, m := range want {
		if code[i] != float32(m/12) || code[i+8] != float32(-m/12) {
			t.Errorf("fp4[%d], fp4[%d] = %v, %v; want ±%v", i, i+8, code[i], code[i+8], m/12)
		}
	}
}

func TestDynamicMap(t *testing.T) {
	c := DynamicMap()
	for i := 1; i < 256; i++ {
		if !(c[i] > c[i-1]) {
			t.Fatalf("map not strictly ascending at %d: %v, %v", i, c[i-1], c[i])
		}
	}
	// hand-computed: decade 0 is the midpoint of {0.1, 1} times 1e-6; the
	// top decade has 65 points 0.9/64 apart, the last midpoint 1 - 0.9/128
	checks := map[int]float64{0: -0.99296875, 254: 0.99296875, 255: 1, 128: 5.5e-7, 127: 0, 126: -5.5e-7}
	for i, v := range checks {
		if c[i] != float32(v) {
			t.Errorf("map[%d] = %v, want %v", i, c[i], v)
		}
	}
	pos := 0
	for _, v := range c {
		if v > 0 && v < 1 {
			pos++
		}
	}
	if pos != 127 { // 1+2+...+64
		t.Errorf("%d positive entries below 1, want 127", pos)
	}
}

// refCode is the nearest table value to x (float64), ties to the lower
// code for NF4 and to the smaller magnitude for FP4; near reports whether
// x lies within 1e-6 of a midpoint, where float32 scaling, or FP4's
// rounded thresholds, may decide the other way.
func refCode(typ Type, x float64) (code byte, near bool) {
	tab := typ.Code()
	best, bestD := -1, math.Inf(1)
	for i, v := range tab {
		d := math.Abs(x - float64(v))
		switch {
		case d < bestD:
			best, bestD = i, d
		case d == bestD:
			if typ == NF4 && tab[i] < tab[best] || typ == FP4 && math.Abs(float64(tab[i])) < math.Abs(float64(tab[best])) {
				best = i
			}
		}
	}
	sorted := tab
	sort.Slice(sorted[:], func(i, j int) bool { return sorted[i] < sorted[j] })
	for i := 1; i < len(sorted); i++ {
		if sorted[i-1] < sorted[i] && math.Abs(x-(float64(sorted[i-1])+float64(sorted[i]))/2) < 1e-6 {
			near = true
		}
	}
	if typ == FP4 && x < 0 && tab[best] == 0 {
		best = 8 // -0: bitsandbytes keeps the sign bit
	}
	return byte(best), near
}

func normalData(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

// TestQuantizeMatchesReference compares every code with a float64
// implementation of the published algorithm: per block absmax, the value
// over it, nearest table entry.
func TestQuantizeMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		typ   Type
		bs    int
		n     int
		scale float64
	}{{NF4, 64, 64 * 300, 0.02}, {FP4, 64, 64 * 300, 0.02}, {NF4, 128, 1000, 3}, {FP4, 32, 999, 1e-3}} {
		vals := normalData(r, tc.n, tc.scale)
		vals[5] = 0
		q, err := Quantize(tc.typ, vals, []int{tc.n}, Options{BlockSize: tc.bs})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Check(); err != nil {
			t.Fatal(err)
		}
		skipped := 0
		for b := 0; b*tc.bs < tc.n; b++ {
			blk := vals[b*tc.bs : min((b+1)*tc.bs, tc.n)]
			m := 0.0
			for _, v := range blk {
				m = max(m, math.Abs(float64(v)))
			}
			if float64(q.Absmax[b]) != m {
				t.Fatalf("%v block %d: absmax %v, want %v", tc.typ, b, q.Absmax[b], m)
			}
			for i, v := range blk {
				want, near := refCode(tc.typ, float64(v)/m)
				if near {
					skipped++
					continue
				}
				if got := q.Nibble(b*tc.bs + i); got != want {
					t.Fatalf("%v element %d (%v / %v): code %d, want %d", tc.typ, b*tc.bs+i, v, m, got, want)
				}
			}
		}
		if skipped > tc.n/1000 {
			t.Errorf("%v: %d of %d values skipped as near a midpoint", tc.typ, skipped, tc.n)
		}
	}
}

// TestHandBlocks checks blocks worked out by hand, the nibble order (the
// first value in the high nibble) and the tie rule.
func TestHandBlocks(t *testing.T) {
	nf4Mid := float32((0.0 + 0.07958029955625534) / 2) // between codes 7 (0) and 8
	for _, tc := range []struct {
		name string
		typ  Type
		vals []float32
		want []byte
	}{
		// /2: 1, -0.5, 0.25, 0 → NF4 15, 2 (-0.5251 is nearer than -0.3949), 10 (0.2461), 7
		{"nf4", NF4, []float32{2, -1, 0.5, 0}, []byte{0xF2, 0xA7}},
		// FP4: 1 is 0b0011, -0.5 is sign|0b0101 (6/12), 0.25 is 0b0111 (3/12), 0 is 0
		{"fp4", FP4, []float32{2, -1, 0.5, 0}, []byte{0x3D, 0x70}},
		// a value exactly on a threshold takes the lower code; the next float up the upper
		{"nf4 tie", NF4, []float32{1, nf4Mid, math.Nextafter32(nf4Mid, 1), -1}, []byte{0xF7, 0x80}},
		// FP4 ties go to the smaller magnitude: 0.29166667 to 3/12, above it to 4/12
		{"fp4 tie", FP4, []float32{1, 0.29166667, math.Nextafter32(0.29166667, 1), -0.29166667}, []byte{0x37, 0x4F}},
		// an odd count: the last value alone in the high nibble
		// (0.5 is nearer 0.4407, code 12, than 0.5626)
		{"odd", NF4, []float32{-1, 1, 0.5}, []byte{0x0F, 0xC0}},
		{"zeros", NF4, []float32{0, 0, 0, 0}, []byte{0x77, 0x77}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Quantize(tc.typ, tc.vals, []int{len(tc.vals)}, Options{BlockSize: 4})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				if q.Packed[i] != tc.want[i] {
					t.Fatalf("packed % x, want % x", q.Packed, tc.want)
				}
			}
			got := q.Dequantize()
			for i, v := range got {
				c := q.Nibble(i)
				if want := q.Code[c] * q.Absmax[0]; v != want {
					t.Errorf("element %d dequantizes to %v, want code %d × %v = %v", i, v, c, q.Absmax[0], want)
				}
			}
		})
	}
}

// refDouble is double quantization in float64: offset the mean, blocks of
// 256 scaled by their absmax, nearest map entry (ties to the lower), and
// the resolved absmax code × scale + offset.
func refDouble(absmax []float32, code [256]float32) (resolved []float64, near []bool) {
	var sum float64
	for _, v := range absmax {
		sum += float64(v)
	}
	off := float64(float32(sum / float64(len(absmax))))
	resolved, near = make([]float64, len(absmax)), make([]bool, len(absmax))
	for lo := 0; lo < len(absmax); lo += 256 {
		hi := min(lo+256, len(absmax))
		m := 0.0
		for _, v := range absmax[lo:hi] {
			m = max(m, math.Abs(float64(v)-off))
		}
		m = float64(float32(m))
		for i := lo; i < hi; i++ {
			x := (float64(absmax[i]) - off) / m
			best := 0
			for j := range code {
				if math.Abs(x-float64(code[j])) < math.Abs(x-float64(code[best])) {
					best = j
				}
			}
			for j := 1; j < 256; j++ {
				if math.Abs(x-(float64(code[j-1])+float64(code[j]))/2) < 1e-6*math.Max(1e-3, math.Abs(x)) {
					near[i] = true
				}
			}
			resolved[i] = float64(code[best])*m + off
		}
	}
	return resolved, near
}

func TestDoubleQuantRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 96, 1024 // 1536 blocks: 6 nested blocks
	vals := normalData(r, rows*cols, 0.02)
	plain, err := Quantize(NF4, vals, []int{rows, cols}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := Quantize(NF4, vals, []int{rows, cols}, Options{Double: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Check(); err != nil {
		t.Fatal(err)
	}
	if len(q.NestedAbsmax) != 6 || len(q.AbsmaxCodes) != 1536 {
		t.Fatalf("%d nested scales, %d codes", len(q.NestedAbsmax), len(q.AbsmaxCodes))
	}
	for i := range q.Packed { // the 4-bit codes do not depend on how absmax is stored
		if q.Packed[i] != plain.Packed[i] {
			t.Fatalf("byte %d: %x with double quantization, %x without", i, q.Packed[i], plain.Packed[i])
		}
	}
	ref, near := refDouble(plain.Absmax, q.NestedCode)
	// bound: the resolved absmax is code×scale+offset in float32, three
	// roundings of values at most |absmax| + |offset|: 3 ulp of float32
	// relative to that; the map's largest half gap is 0.9/128 of a scale
	var worst float64
	for b := range plain.Absmax {
		got := float64(q.BlockAbsmax(b))
		if !near[b] {
			if d := math.Abs(got - ref[b]); d > 3*0x1p-24*(math.Abs(ref[b])+math.Abs(float64(q.Offset))) {
				t.Fatalf("block %d: resolved absmax %v, reference %v", b, got, ref[b])
			}
		}
		rel := math.Abs(got-float64(plain.Absmax[b])) / float64(q.NestedAbsmax[b/256])
		worst = max(worst, rel)
	}
	if worst > 0.9/128+1e-6 {
		t.Errorf("absmax error %.4g of its nested scale, over the map's half gap %.4g", worst, 0.9/128)
	}
	t.Logf("double quantization: absmax error at most %.4g of the nested scale (bound %.4g); %d bytes against %d",
		worst, 0.9/128, q.Bytes(), plain.Bytes())
}

// TestRoundTripError reports the error statistics of 4-bit round trips of
// normal weights and checks each element against its bound: half the
// widest gap of the table around its code, times its block's absmax (plus
// the absmax error from double quantization, times |code| ≤ 1).
func TestRoundTripError(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const rows, cols = 256, 1024
	vals := normalData(r, rows*cols, 0.02)
	var sumSq float64
	for _, v := range vals {
		sumSq += float64(v) * float64(v)
	}
	rms := math.Sqrt(sumSq / float64(len(vals)))
	for _, typ := range []Type{NF4, FP4} {
		for _, double := range []bool{false, true} {
			q, err := Quantize(typ, vals, []int{rows, cols}, Options{Double: double})
			if err != nil {
				t.Fatal(err)
			}
			plain, _ := Quantize(typ, vals, []int{rows, cols}, Options{})
			code := q.Code
			sorted := append([]float32(nil), code[:]...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			halfGap := func(x float64) float64 { // half the gap of the table interval holding x
				for i := 1; i < len(sorted); i++ {
					if x <= float64(sorted[i]) {
						return (float64(sorted[i]) - float64(sorted[i-1])) / 2
					}
				}
				return 0
			}
			back := q.Dequantize()
			var se, maxRel float64
			for i, v := range vals {
				b := i / q.BlockSize
				m := float64(plain.Absmax[b])
				d := math.Abs(float64(back[i]) - float64(v))
				se += d * d
				bound := m*halfGap(float64(v)/m)*(1+1e-6) + math.Abs(float64(q.BlockAbsmax(b))-m)
				if d > bound {
					t.Fatalf("%v double=%v element %d: %v back as %v, error %.3g over bound %.3g", typ, double, i, v, back[i], d, bound)
				}
				maxRel = max(maxRel, d/m)
			}
			bits := 8 * float64(q.Bytes()) / float64(len(vals))
			t.Logf("%v double=%-5v: rmse %.4g (%.2f%% of the weights' rms), max error %.3f of the block absmax, %.3f bits per parameter",
				typ, double, math.Sqrt(se/float64(len(vals))), 100*math.Sqrt(se/float64(len(vals)))/rms, maxRel, bits)
		}
	}
}

func TestDequantizeRange(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	vals := normalData(r, 1001, 1)
	q, err := Quantize(NF4, vals, []int{7, 143}, Options{Double: true})
	if err != nil {
		t.Fatal(err)
	}
	full := q.Dequantize()
	for _, rg := range [][2]int{{0, 1001}, {1, 2}, {63, 65}, {64, 128}, {143, 286}, {3, 1000}, {1000, 1001}, {500, 500}} {
		got := make([]float32, rg[1]-rg[0])
		q.DequantizeRange(got, rg[0], rg[1])
		for i, v := range got {
			if v != full[rg[0]+i] {
				t.Fatalf("range %v element %d: %v, whole tensor %v", rg, rg[0]+i, v, full[rg[0]+i])
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Quantize(NF4, []float32{1, float32(math.NaN())}, []int{2}, Options{}); !errors.Is(err, ErrNonFinite) {
		t.Errorf("NaN: %v", err)
	}
	if _, err := Quantize(NF4, []float32{1, 2, 3}, []int{2}, Options{}); err == nil {
		t.Error("3 values for shape [2] accepted")
	}
	if _, err := Quantize(NF4, []float32{1, 2}, []int{2}, Options{BlockSize: 3}); err == nil {
		t.Error("odd block size accepted")
	}
	q, _ := Quantize(NF4, make([]float32, 300), []int{300}, Options{Double: true})
	q.AbsmaxCodes = q.AbsmaxCodes[:2]
	if err := q.Check(); err == nil {
		t.Error("short absmax codes pass Check")
	}
	if _, err := ParseType("int4"); err == nil {
		t.Error("int4 parsed")
	}
}

func TestBlobRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	vals := normalData(r, 3*700, 0.5)
	for _, double := range []bool{false, true} {
		q, err := Quantize(FP4, vals, []int{3, 700}, Options{Double: double})
		if err != nil {
			t.Fatal(err)
		}
		blob := q.Encode()
		back, err := Decode(blob)
		if err != nil {
			t.Fatal(err)
		}
		want, got := q.Dequantize(), back.Dequantize()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("double=%v element %d: %v after a blob round trip, %v before", double, i, got[i], want[i])
			}
		}
		if _, err := Decode(blob[:len(blob)-1]); err == nil {
			t.Error("a truncated blob decoded")
		}
		if _, err := Decode(append(blob[:len(blob):len(blob)], 0)); err == nil {
			t.Error("a blob with a byte past its end decoded")
		}
	}
}

// Layout's offsets find each part of a blob where Encode put it.
func TestBlobLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	vals := normalData(r, 5*300, 0.5)
	for _, double := range []bool{false, true} {
		q, err := Quantize(NF4, vals, []int{5, 300}, Options{Double: double})
		if err != nil {
			t.Fatal(err)
		}
		blob := q.Encode()
		_, l, err := Layout(blob)
		if err != nil {
			t.Fatal(err)
		}
		f := func(off, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(blob[off+4*i:])) }
		for i, v := range q.Code {
			if f(l.Code, i) != v {
				t.Fatalf("double=%v: code[%d] at the layout's offset is %v, want %v", double, i, f(l.Code, i), v)
			}
		}
		if double {
			for i, v := range q.NestedCode {
				if f(l.NestedCode, i) != v {
					t.Fatalf("nested code[%d]: %v, want %v", i, f(l.NestedCode, i), v)
				}
			}
			for i, v := range q.NestedAbsmax {
				if f(l.NestedAbsmax, i) != v {
					t.Fatalf("nested absmax[%d]: %v, want %v", i, f(l.NestedAbsmax, i), v)
				}
			}
			if !bytes.Equal(blob[l.AbsmaxCodes:l.AbsmaxCodes+len(q.AbsmaxCodes)], q.AbsmaxCodes) || l.Absmax != -1 {
				t.Fatalf("absmax codes not at %d (absmax at %d)", l.AbsmaxCodes, l.Absmax)
			}
		} else {
			for i, v := range q.Absmax {
				if f(l.Absmax, i) != v {
					t.Fatalf("absmax[%d]: %v, want %v", i, f(l.Absmax, i), v)
				}
			}
			if l.NestedCode != -1 || l.NestedAbsmax != -1 || l.AbsmaxCodes != -1 {
				t.Fatalf("nested parts in a plain blob: %+v", l)
			}
		}
		if !bytes.Equal(blob[l.Packed:], q.Packed) || l.Code%4 != 0 {
			t.Fatalf("double=%v: packed codes not at %d, or code at %d unaligned", double, l.Packed, l.Code)
		}
	}
}

// QuantizeBlob writes, in place, the blob Quantize's tensor encodes to,
// byte for byte: both types, with and without double quantization, block
// sizes of 32, 64 and 128, odd lengths, more than one nested block, and a
// block of zeros; a non-finite value is refused.
func TestQuantizeBlob(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, shape := range [][]int{{7, 143}, {300, 257}, {1}, {64}} {
		n := 1
		for _, d := range shape {
			n *= d
		}
		vals := normalData(r, n, 0.1)
		if n > 128 {
			clear(vals[64:128])
		}
		for _, typ := range []Type{NF4, FP4} {
			for _, o := range []Options{{}, {Double: true}, {BlockSize: 32, Double: true}, {BlockSize: 128}} {
				q, err := Quantize(typ, vals, shape, o)
				if err != nil {
					t.Fatal(err)
				}
				got, err := QuantizeBlob(typ, vals, shape, o)
				if err != nil {
					t.Fatal(err)
				}
				if want := q.Encode(); !bytes.Equal(got, want) {
					t.Fatalf("%v %v %+v: QuantizeBlob differs from Quantize's Encode (%d and %d bytes)", typ, shape, o, len(got), len(want))
				}
			}
		}
	}
	if _, err := QuantizeBlob(NF4, []float32{1, float32(math.Inf(1))}, []int{2}, Options{Double: true}); !errors.Is(err, ErrNonFinite) {
		t.Errorf("Inf: %v", err)
	}
}

// NF4's code is the number of thresholds x exceeds: on each threshold and
// its neighbouring floats, at ±0, ±1, past them, NaN (no threshold) and a
// million random values.
func TestNF4CodeCountsThresholds(t *testing.T) {
	count := func(x float32) byte {
		var c byte
		for _, p := range nf4Pivots {
			if x > p {
				c++
			}
		}
		return c
	}
	xs := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.5, -1.5, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for _, p := range nf4Pivots {
		xs = append(xs, p, math.Nextafter32(p, 2), math.Nextafter32(p, -2))
	}
	r := rand.New(rand.NewPCG(15, 16))
	for range 1_000_000 {
		xs = append(xs, float32(r.Float64()*2.2-1.1))
	}
	for _, x := range xs {
		if got, want := NF4.quantize4(x), count(x); got != want {
			t.Fatalf("NF4 code of %v: %d, want %d (thresholds exceeded)", x, got, want)
		}
	}
}
