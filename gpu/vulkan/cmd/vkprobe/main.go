// Command vkprobe lists the Vulkan devices this machine offers, checks
// mixtune's Vulkan kernels on one of them against a float64 CPU reference
// (GEMM in all transpose combinations, GEMM with a bf16 or fp16 B, and the
// bf16/fp16 rounding kernels bit for bit), and measures GEMM GFLOP/s.
//
// It is built without cgo and needs only the Vulkan loader
// (libvulkan.so.1) and a driver (ICD) at run time:
//
//	CGO_ENABLED=0 go build -o vkprobe ./gpu/vulkan/cmd/vkprobe
//	./vkprobe                      # list, check and time the first GPU
//	./vkprobe -device GPU-8f2c…    # pick by UUID (as nvidia-smi -L prints), index or PCI bus id
//	./vkprobe -list                # list only
//	VK_DRIVER_FILES=/usr/share/vulkan/icd.d/nvidia_icd.json ./vkprobe
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vulkan"
)

func main() {
	var (
		device = flag.String("device", "", "device to use: index, UUID (GPU-…, a unique prefix is enough) or PCI bus id; default the first GPU, else the first device")
		list   = flag.Bool("list", false, "only list the devices")
		lib    = flag.String("lib", "", "Vulkan loader library to open (default libvulkan.so.1 and the platform's names)")
		sizes  = flag.String("sizes", "", "square GEMM sizes to time, comma-separated (default 1024,2048,4096; 128,256 on CPU devices)")
		reps   = flag.Int("reps", 5, "GEMMs per timed batch")
		check  = flag.Bool("check", true, "check the kernels against the CPU reference")
	)
	flag.Parse()
	if err := run(*device, *lib, *sizes, *list, *check, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "vkprobe:", err)
		if errors.Is(err, vulkan.ErrNoLoader) {
			fmt.Fprintln(os.Stderr, "install the Vulkan loader (Debian: libvulkan1) or pass -lib /path/to/libvulkan.so.1")
		}
		if errors.Is(err, vulkan.ErrNoDevice) {
			fmt.Fprintln(os.Stderr, "no driver found: point VK_DRIVER_FILES at the driver's ICD manifest (e.g. nvidia_icd.json)")
		}
		os.Exit(1)
	}
}

func run(spec, libName, sizeList string, listOnly, check bool, reps int) error {
	var l *vulkan.Library
	var err error
	if libName != "" {
		l, err = vulkan.LoadFrom(libName)
	} else {
		l, err = vulkan.Load()
	}
	if err != nil {
		return err
	}
	defer l.Close()
	in, err := vulkan.NewInstance(l, "vkprobe")
	if err != nil {
		return err
	}
	defer in.Close()
	devs, err := in.PhysicalDevices()
	if err != nil {
		return err
	}
	fmt.Printf("loader %s; %d device(s)\n", l.Name(), len(devs))
	for _, p := range devs {
		describe(p)
	}
	if listOnly {
		return nil
	}
	var p *vulkan.PhysicalDevice
	if spec != "" {
		if p, err = vulkan.Select(devs, spec); err != nil {
			return err
		}
	} else {
		p = devs[0]
		for _, q := range devs {
			if q.Type == vulkan.TypeDiscreteGPU || q.Type == vulkan.TypeIntegratedGPU {
				p = q
				break
			}
		}
	}
	d, err := in.OpenDevice(p)
	if err != nil {
		return err
	}
	defer d.Close()
	ks, err := vulkan.NewKernels(d)
	if err != nil {
		return err
	}
	defer ks.Close()
	fmt.Printf("\nusing device %d: %s; GEMM variant %s\n", p.Index, p.Name, ks.Variant.Name)
	if check {
		if err := checks(d, ks); err != nil {
			return err
		}
	}
	ns := []int{1024, 2048, 4096}
	if p.Type == vulkan.TypeCPU {
		ns = []int{128, 256}
	}
	if sizeList != "" {
		ns = nil
		for _, s := range strings.Split(sizeList, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return fmt.Errorf("-sizes: bad size %q", s)
			}
			ns = append(ns, n)
		}
	}
	fmt.Println("\nGEMM C = A·B, n×n×n, best of 3 batches of", reps)
	for _, n := range ns {
		for _, b := range []struct {
			name string
			b16  bool
			h    vulkan.Half
		}{{"fp32", false, 0}, {"bf16 B", true, vulkan.BF16}, {"fp16 B", true, vulkan.FP16}} {
			gf, err := timeGemm(d, ks, n, reps, b.b16, b.h)
			if err != nil {
				return fmt.Errorf("timing %d³ %s: %w", n, b.name, err)
			}
			fmt.Printf("  %5d³ %-7s %9.1f GFLOP/s\n", n, b.name, gf)
		}
	}
	return nil
}

func describe(p *vulkan.PhysicalDevice) {
	fmt.Printf("\n[%d] %s\n", p.Index, p.Name)
	fmt.Printf("    vendor %s (%#x), device %#x, %s, Vulkan %s\n", p.Vendor(), p.VendorID, p.DeviceID, p.Type, p.VersionString())
	fmt.Printf("    driver %s %s (%s)\n", p.DriverName, p.DriverVersionString(), p.DriverInfo)
	fmt.Printf("    UUID %s\n", p.UUIDString())
	pci := p.PCIBusID
	if pci == "" {
		pci = "unknown (no VK_EXT_pci_bus_info)"
	}
	fmt.Printf("    PCI bus id %s\n", pci)
	fmt.Printf("    device-local memory %.1f GiB; subgroup %d; shared memory %d KiB; maxStorageBufferRange %d MiB; %d invocations per workgroup\n",
		float64(p.DeviceLocalBytes)/(1<<30), p.SubgroupSize, p.MaxSharedMemory>>10, p.MaxStorageBufferRange>>20, p.MaxWorkgroupInvocations)
	fmt.Printf("    shaderFloat16 %v; cooperative matrix: KHR %v, NV %v, NV2 %v; shader bfloat16 %v\n",
		p.ShaderFloat16, p.CooperativeMatrixKHR, p.CooperativeMatrixNV, p.CooperativeMatrix2NV, p.ShaderBFloat16)
}

// buffers holds a test's device buffers, freed together.
type buffers []*vulkan.Buffer

func (bs *buffers) f32(d *vulkan.Device, xs []float32) (*vulkan.Buffer, error) {
	b, err := d.NewBuffer(4 * len(xs))
	if err != nil {
		return nil, err
	}
	*bs = append(*bs, b)
	return b, b.WriteFloat32(0, xs)
}

func (bs *buffers) u16(d *vulkan.Device, hs []uint16) (*vulkan.Buffer, error) {
	b, err := d.NewBuffer(2*len(hs) + 2)
	if err != nil {
		return nil, err
	}
	*bs = append(*bs, b)
	return b, b.WriteUint16(0, hs)
}

func (bs buffers) free() {
	for _, b := range bs {
		b.Free()
	}
}

// checks runs the kernels on the device and compares with the CPU.
func checks(d *vulkan.Device, ks *vulkan.Kernels) error {
	fmt.Println("\nchecks against the CPU (float64 reference; bound γ_{k+2}·(|α|Σ|a||b| + |βc|), u = 2^-24):")
	rng := rand.New(rand.NewPCG(7, 8))
	m, n, k := 257, 193, 320
	for _, h := range []struct {
		name string
		b16  bool
		half vulkan.Half
	}{{"fp32", false, 0}, {"bf16 B", true, vulkan.BF16}, {"fp16 B", true, vulkan.FP16}} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			worst, err := gemmCheck(d, ks, rng, m, n, k, tr[0], tr[1], h.b16, h.half)
			if err != nil {
				return fmt.Errorf("GEMM %s transA=%v transB=%v: %w", h.name, tr[0], tr[1], err)
			}
			fmt.Printf("  GEMM %-7s %d×%d×%d transA=%-5v transB=%-5v ok: worst error %.3f of the bound\n", h.name, m, n, k, tr[0], tr[1], worst)
		}
	}
	return roundCheck(d, ks, rng)
}

func gemmCheck(d *vulkan.Device, ks *vulkan.Kernels, rng *rand.Rand, m, n, k int, ta, tb, b16 bool, half vulkan.Half) (float64, error) {
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	for _, xs := range [][]float32{a, b, c} {
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
	}
	var bs buffers
	defer bs.free()
	A, err := bs.f32(d, a)
	if err != nil {
		return 0, err
	}
	C, err := bs.f32(d, c)
	if err != nil {
		return 0, err
	}
	var B *vulkan.Buffer
	if b16 {
		f := amp.BF16
		if half == vulkan.FP16 {
			f = amp.FP16
		}
		hs := make([]uint16, len(b))
		for i := range b {
			hs[i] = f.Bits16(b[i])
			b[i] = f.FromBits16(hs[i])
		}
		B, err = bs.u16(d, hs)
	} else {
		B, err = bs.f32(d, b)
	}
	if err != nil {
		return 0, err
	}
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	const alpha, beta = 1.25, -0.5
	r, err := d.NewRecorder()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	if err := ks.Gemm(r, vulkan.GemmArgs{M: m, N: n, K: k, TransA: ta, TransB: tb, Alpha: alpha, Beta: beta,
		A: A, B: B, C: C, Lda: lda, Ldb: ldb, Ldc: n, B16: b16, BHalf: half}); err != nil {
		return 0, err
	}
	if err := r.Submit(); err != nil {
		return 0, err
	}
	got := make([]float32, m*n)
	if err := C.ReadFloat32(0, got); err != nil {
		return 0, err
	}
	nu := float64(k+2) * 0x1p-24
	g := nu / (1 - nu)
	worst := 0.0
	for i := range m {
		for j := range n {
			var s, sa float64
			for p := range k {
				ai, bi := i*lda+p, p*ldb+j
				if ta {
					ai = p*lda + i
				}
				if tb {
					bi = j*ldb + p
				}
				x := float64(a[ai]) * float64(b[bi])
				s += x
				sa += math.Abs(x)
			}
			want := alpha*s + beta*float64(c[i*n+j])
			bound := g * (alpha*sa + math.Abs(beta*float64(c[i*n+j])))
			e := math.Abs(float64(got[i*n+j]) - want)
			if !(e <= bound) {
				return 0, fmt.Errorf("C[%d,%d] = %g, want %g ± %.3g", i, j, got[i*n+j], want, bound)
			}
			worst = max(worst, e/bound)
		}
	}
	return worst, nil
}

// roundCheck rounds every bf16 tie and its neighbours, every fp16 bit
// pattern widened and the midpoints, and a million random patterns, and
// compares with amp bit for bit.
func roundCheck(d *vulkan.Device, ks *vulkan.Kernels, rng *rand.Rand) error {
	var in []uint32
	for h := range uint32(1 << 16) {
		in = append(in, h<<16|0x7fff, h<<16|0x8000, h<<16|0x8001, math.Float32bits(amp.FP16.FromBits16(uint16(h)))+0x1000)
	}
	for range 1 << 20 {
		in = append(in, rng.Uint32())
	}
	xs := make([]float32, len(in))
	for i, u := range in {
		xs[i] = math.Float32frombits(u)
	}
	var bs buffers
	defer bs.free()
	X, err := bs.f32(d, xs)
	if err != nil {
		return err
	}
	Y, err := bs.u16(d, make([]uint16, len(in)))
	if err != nil {
		return err
	}
	r, err := d.NewRecorder()
	if err != nil {
		return err
	}
	defer r.Close()
	for _, h := range []vulkan.Half{vulkan.BF16, vulkan.FP16} {
		f := amp.BF16
		if h == vulkan.FP16 {
			f = amp.FP16
		}
		if err := ks.Round16(r, h, X, Y, len(in)); err != nil {
			return err
		}
		if err := r.Submit(); err != nil {
			return err
		}
		got := make([]uint16, len(in))
		if err := Y.ReadUint16(0, got); err != nil {
			return err
		}
		for i, u := range in {
			if want := f.Bits16(math.Float32frombits(u)); got[i] != want {
				return fmt.Errorf("round %s: %#08x → %#04x, want %#04x", h, u, got[i], want)
			}
		}
		fmt.Printf("  round fp32→%s: %d values bit-identical to the CPU\n", h, len(in))
	}
	return nil
}

// timeGemm is the best GFLOP/s of 3 batches of reps n³ GEMMs.
func timeGemm(d *vulkan.Device, ks *vulkan.Kernels, n, reps int, b16 bool, half vulkan.Half) (float64, error) {
	var bs buffers
	defer bs.free()
	x := make([]float32, n*n)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	A, err := bs.f32(d, x)
	if err != nil {
		return 0, err
	}
	C, err := bs.f32(d, x)
	if err != nil {
		return 0, err
	}
	var B *vulkan.Buffer
	if b16 {
		B, err = bs.u16(d, make([]uint16, n*n))
	} else {
		B, err = bs.f32(d, x)
	}
	if err != nil {
		return 0, err
	}
	r, err := d.NewRecorder()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	g := vulkan.GemmArgs{M: n, N: n, K: n, Alpha: 1, A: A, B: B, C: C, Lda: n, Ldb: n, Ldc: n, B16: b16, BHalf: half}
	if err := ks.Gemm(r, g); err != nil { // warm up: the driver compiles the pipeline
		return 0, err
	}
	if err := r.Submit(); err != nil {
		return 0, err
	}
	best := time.Duration(math.MaxInt64)
	for range 3 {
		t0 := time.Now()
		for range reps {
			if err := ks.Gemm(r, g); err != nil {
				return 0, err
			}
		}
		if err := r.Submit(); err != nil {
			return 0, err
		}
		best = min(best, time.Since(t0))
	}
	return 2 * float64(n) * float64(n) * float64(n) * float64(reps) / best.Seconds() / 1e9, nil
}
