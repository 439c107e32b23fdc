package train

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/cpufeat"
	"github.com/mixtune/mixtune/nn"
)

type fakeBF16 struct{}

func (fakeBF16) Name() string { return "fake bf16" }
func (fakeBF16) GemmBF16(bool, bool, int, int, int, float32, []uint16, int, []uint16, int, float32, []float32, int) {
}

// TestDecideBF16 overrides the CPU's features and what the bf16 GEMM
// dispatch answers, so every choice of amp.bf16_matmul is made here.
func TestDecideBF16(t *testing.T) {
	units := cpufeat.Features{AVX512F: true, AVX512BF16: true}
	none := cpufeat.Features{AVX512F: true}
	onUnits := func() ([]blas.BF16Choice, error) {
		return []blas.BF16Choice{{Gemmer: fakeBF16{}, Units: true, Reason: "fake on VDPBF16PS"}}, nil
	}
	emulated := func() ([]blas.BF16Choice, error) {
		return []blas.BF16Choice{{Gemmer: fakeBF16{}, Units: false, Reason: "fake, emulated"}}, nil
	}
	native := func() ([]blas.BF16Choice, error) {
		return []blas.BF16Choice{{Gemmer: &blas.NativeBF16{}, Units: true, Reason: "native VDPBF16PS kernel"}}, nil
	}
	// oneDNN's and the native kernel both run: auto measures both
	both := func() ([]blas.BF16Choice, error) {
		return []blas.BF16Choice{{Gemmer: fakeBF16{}, Units: true, Reason: "fake on AMX"}, {Gemmer: &blas.NativeBF16{}, Units: true, Reason: "native AMX kernel"}}, nil
	}
	missing := func() ([]blas.BF16Choice, error) {
		return nil, blas.ErrNoBF16Gemm
	}
	// what MeasureBF16 answers: the bf16 GEMM faster than the emulation
	// or not
	faster := func(blas.BF16Gemmer) (blas.BF16Speed, []string) {
		return blas.BF16Speed{Emulate: 100, Hardware: 180, Source: "measured"}, nil
	}
	slower := func(blas.BF16Gemmer) (blas.BF16Speed, []string) {
		return blas.BF16Speed{Emulate: 100, Hardware: 60, Source: "measured"}, []string{"busy"}
	}
	// by kernel: the native one faster than the fake, or the reverse
	nativeFastest := func(g blas.BF16Gemmer) (blas.BF16Speed, []string) {
		if _, ok := g.(*blas.NativeBF16); ok {
			return blas.BF16Speed{Emulate: 100, Hardware: 300, Source: "measured"}, nil
		}
		return blas.BF16Speed{Emulate: 100, Hardware: 150, Source: "measured"}, nil
	}
	fakeFastest := func(g blas.BF16Gemmer) (blas.BF16Speed, []string) {
		if _, ok := g.(*blas.NativeBF16); ok {
			return blas.BF16Speed{Emulate: 100, Hardware: 120, Source: "measured"}, nil
		}
		return blas.BF16Speed{Emulate: 100, Hardware: 250, Source: "measured"}, nil
	}
	for _, tc := range []struct {
		name    string
		mode    amp.BF16Matmul
		low     amp.Format
		f       cpufeat.Features
		choose  func() ([]blas.BF16Choice, error)
		measure func(blas.BF16Gemmer) (blas.BF16Speed, []string)
		path    string
		gemmer  bool
		reason  string
		warning string
		err     bool
		wrong   bool // the check finds the GEMM's products wrong
	}{
		{"fp32 run", amp.BF16Auto, amp.FP32, units, onUnits, faster, "", false, "", "", false, false},
		{"fp16 run, hardware asked", amp.BF16Hardware, amp.FP16, units, onUnits, faster, "", false, "", "does nothing at precision fp16", false, false},
		{"emulate on bf16 units", amp.BF16Emulate, amp.BF16, units, onUnits, faster, bf16PathEmulate, false, "emulate", "", false, false},
		{"auto on bf16 units", amp.BF16Auto, amp.BF16, units, onUnits, faster, bf16PathHardware, true, "fake on VDPBF16PS", "", false, false},
		{"auto without bf16 units", amp.BF16Auto, amp.BF16, none, emulated, faster, bf16PathEmulate, false, "no bf16 units", "", false, false},
		{"auto, units but no bf16 GEMM", amp.BF16Auto, amp.BF16, units, missing, faster, bf16PathEmulate, false, "no bf16 GEMM", "", false, false},
		{"auto, the native kernel, faster", amp.BF16Auto, amp.BF16, units, native, faster, bf16PathHardware, true, "native VDPBF16PS kernel: bf16 GEMM 180 GFLOP/s against 100 emulated", "", false, false},
		{"auto, the native kernel, slower", amp.BF16Auto, amp.BF16, units, native, slower, bf16PathEmulate, false, "not faster than the emulation here: bf16 GEMM 60", "busy", false, false},
		{"auto, oneDNN on bf16 units, slower", amp.BF16Auto, amp.BF16, units, onUnits, slower, bf16PathEmulate, false, "fake on VDPBF16PS is not faster", "busy", false, false},
		{"hardware, the native kernel, slower", amp.BF16Hardware, amp.BF16, units, native, slower, bf16PathHardware, true, "native VDPBF16PS kernel", "", false, false},
		{"hardware, the native kernel", amp.BF16Hardware, amp.BF16, units, native, faster, bf16PathHardware, true, "native VDPBF16PS kernel", "", false, false},
		{"hardware on bf16 units", amp.BF16Hardware, amp.BF16, units, onUnits, faster, bf16PathHardware, true, "fake on VDPBF16PS", "", false, false},
		{"hardware, oneDNN emulating", amp.BF16Hardware, amp.BF16, none, emulated, faster, bf16PathHardware, true, "emulated", "slower than emulate", false, false},
		{"hardware without a bf16 GEMM", amp.BF16Hardware, amp.BF16, none, missing, faster, "", false, "", "", true, false},
		{"auto, two bf16 GEMMs, the second fastest", amp.BF16Auto, amp.BF16, units, both, nativeFastest, bf16PathHardware, true, "auto → hardware: native AMX kernel: bf16 GEMM 300 GFLOP/s against 100 emulated (measured); not taken: fake on AMX: bf16 GEMM 150", "", false, false},
		{"auto, two bf16 GEMMs, the first fastest", amp.BF16Auto, amp.BF16, units, both, fakeFastest, bf16PathHardware, true, "auto → hardware: fake on AMX: bf16 GEMM 250 GFLOP/s against 100 emulated (measured); not taken: native AMX kernel: bf16 GEMM 120", "", false, false},
		{"auto, two bf16 GEMMs, both slower", amp.BF16Auto, amp.BF16, units, both, slower, bf16PathEmulate, false, "auto → emulate: no bf16 GEMM is faster than the emulation here: fake on AMX: bf16 GEMM 60 GFLOP/s against 100 emulated (measured); native AMX kernel: bf16 GEMM 60", "busy\nbusy", false, false},
		{"hardware, two bf16 GEMMs: the first", amp.BF16Hardware, amp.BF16, units, both, nativeFastest, bf16PathHardware, true, "hardware: fake on AMX", "", false, false},
		{"hardware, wrong products", amp.BF16Hardware, amp.BF16, units, onUnits, faster, "", false, "", "", false, true},
		{"emulate, wrong products: not checked, not taken", amp.BF16Emulate, amp.BF16, units, onUnits, faster, bf16PathEmulate, false, "emulate", "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checked := 0
			check := func(blas.BF16Gemmer) error {
				checked++
				if tc.wrong {
					return errors.New("C[0,0] = 2, want 1 within 1e-6")
				}
				return nil
			}
			d, err := decideBF16(tc.mode, tc.low, tc.f, tc.choose, tc.measure, check)
			if tc.wrong && tc.mode == amp.BF16Hardware {
				if err == nil || !strings.Contains(err.Error(), "gives wrong products") || !strings.Contains(err.Error(), "amp.bf16_matmul: emulate") {
					t.Fatalf("got %+v, %v; want the check's error, naming amp.bf16_matmul", d, err)
				}
				return
			}
			if tc.mode == amp.BF16Hardware && tc.low == amp.BF16 && !tc.err && checked != 1 {
				t.Fatalf("hardware took a bf16 GEMM after %d checks, want 1", checked)
			}
			if tc.err {
				if err == nil || !errors.Is(err, blas.ErrNoBF16Gemm) || !strings.Contains(err.Error(), "amp.bf16_matmul") {
					t.Fatalf("got %+v, %v; want an error naming amp.bf16_matmul", d, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.path != tc.path || (d.gemmer != nil) != tc.gemmer || !strings.Contains(d.reason, tc.reason) {
				t.Fatalf("got path %q gemmer %v reason %q; want %q, %v, %q", d.path, d.gemmer, d.reason, tc.path, tc.gemmer, tc.reason)
			}
			w := strings.Join(d.warnings, "\n")
			if (tc.warning == "") != (w == "") || !strings.Contains(w, tc.warning) {
				t.Fatalf("warnings %q, want %q", w, tc.warning)
			}
		})
	}
}

func TestResumeBF16Warning(t *testing.T) {
	dir := t.TempDir()
	if _, ok := startedBF16(dir); ok {
		t.Fatal("a directory without run.json reports a bf16 path")
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte(`{"bf16_matmul": "hardware"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	started, ok := startedBF16(dir)
	if !ok || started != bf16PathHardware {
		t.Fatalf("startedBF16 = %q, %v", started, ok)
	}
	if w := resumeBF16Warning(started, bf16PathHardware); w != "" {
		t.Errorf("same path warns: %q", w)
	}
	if w := resumeBF16Warning(started, bf16PathEmulate); !strings.Contains(w, "ran as hardware") || !strings.Contains(w, "now run as emulate") {
		t.Errorf("changed path: warning %q", w)
	}
}

// TestBF16HardwareLossCurve trains the same model with its bf16 products
// emulated and on the native bf16 GEMM's driver (on the Go model of
// VDPBF16PS, so on any CPU; the kernel itself is held to that model bit
// for bit where it runs): the losses must agree within 1e-2 relative.
// Both sum the same exact products in fp32 in different orders, so an
// op's fp32 result differs by a few ulps, and its bf16 rounding then by
// at most one bf16 ulp (2^-8 relative) where the two straddle a rounding
// boundary; over 3 optimizer steps (6 micro-batches) at a 1e-2 learning
// rate those differences move the loss by well under 1e-2, as on the
// Vulkan engine (TestVulkanQuickstartMatchesCPU), while a wrong product
// (a transposed or stale operand) moves it by far more. (This model is
// small enough, sums of at most 24 products, that most sums are exact in
// either order: the losses often agree bit for bit.)
func TestBF16HardwareLossCurve(t *testing.T) {
	emu, _, _ := fullFineTuneOn(t, &nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, false, amp.BF16, graphOptions{}, 3)
	g := &countingBF16{NativeBF16: blas.NewNativeBF16Go(2)}
	hw, _, _ := fullFineTuneOn(t, &nn.Engine{BLAS: blas.Native{Workers: 2}, BF16: g, Workers: 2}, false, amp.BF16, graphOptions{}, 3)
	if g.calls.Load() == 0 || len(emu) != len(hw) {
		t.Fatalf("%d products on the bf16 GEMM; %d and %d losses", g.calls.Load(), len(emu), len(hw))
	}
	for i := range emu {
		if rel := math.Abs(hw[i]-emu[i]) / math.Abs(emu[i]); rel > 1e-2 {
			t.Fatalf("loss %d: %v on the bf16 GEMM, %v emulated: %.2g relative", i, hw[i], emu[i], rel)
		}
	}
	t.Logf("%d products on the bf16 GEMM; losses emulated %.7g, on it %.7g", g.calls.Load(), emu, hw)
}

// countingBF16 is the native bf16 driver counting its products.
type countingBF16 struct {
	*blas.NativeBF16
	calls atomic.Int64
}

func (c *countingBF16) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, pb *blas.PackedBF16, beta float32, cm []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	c.calls.Add(1)
	c.NativeBF16.Gemm(transA, transB, m, n, k, alpha, a, b, pb, beta, cm, ldc, done)
}
