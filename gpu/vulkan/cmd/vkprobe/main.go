// Command vkprobe lists the Vulkan devices this machine offers, checks
// mixtune's Vulkan kernels on one of them against a float64 CPU reference
// (every GEMM variant the device runs in all transpose combinations: the
// scalar kernel with fp32, bf16 or fp16 B, and every tile of the fp16
// and bf16 tensor-core kernels, each with fp32 and 16-bit B; the
// bf16/fp16 rounding kernels bit for bit; split-K on the LoRA adapters'
// thin products), and measures each GEMM variant's TFLOP/s at square and
// training shapes, the thin products with and without split-K.
//
// It is built without cgo and needs only the Vulkan loader
// (libvulkan.so.1) and a driver (ICD) at run time:
//
//	CGO_ENABLED=0 go build -o vkprobe ./gpu/vulkan/cmd/vkprobe
//	./vkprobe                      # list, check and time the first GPU
//	./vkprobe -device GPU-8f2c…    # pick by UUID (as nvidia-smi -L prints), index or PCI bus id
//	./vkprobe -list                # list only
//	./vkprobe -variants coopmat-nv-fp16-128x256,scalar-tiled-64x64  # some variants only
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
		shapes = flag.String("shapes", "", "GEMM shapes M×N×K to time, comma-separated as MxNxK, a t after a size's A or B for a transposed operand (MxNtxK...: see -help); default the TinyLlama training shapes on GPUs")
		reps   = flag.Int("reps", 5, "GEMMs per timed batch")
		check  = flag.Bool("check", true, "check the kernels against the CPU reference")
		vars   = flag.String("variants", "", "GEMM variants to check and time, comma-separated names (default every one the device runs)")
		stats  = flag.String("stats", "", "only print what the driver's compiler made of the embedded shaders matching these comma-separated patterns (registers, spills, shared memory: VK_KHR_pipeline_executable_properties), e.g. 'attention_coop_[df]*_d64_bf16.spv,gemm_cm2_*'")
		narrow = flag.Bool("narrow16", false, "run the tensor-core variants with their operands narrowed to 16-bit memory first (vulkan.KernelOptions.Narrow16); the timings include the narrowing")
	)
	flag.Parse()
	if err := run(*device, *lib, *sizes, *shapes, *vars, *stats, *list, *check, *narrow, *reps); err != nil {
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

func run(spec, libName, sizeList, shapeList, variantList, statsList string, listOnly, check, narrow16 bool, reps int) error {
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
	if statsList != "" {
		return printStatistics(in, p, statsList)
	}
	d, err := in.OpenDevice(p)
	if err != nil {
		return err
	}
	defer d.Close()
	ks, err := vulkan.NewKernelsWith(d, vulkan.KernelOptions{Narrow16: narrow16})
	if err != nil {
		return err
	}
	defer ks.Close()
	fmt.Printf("\nusing device %d: %s\n", p.Index, p.Name)
	if narrow16 {
		fmt.Println("  tensor-core products: operands narrowed to 16-bit memory first (-narrow16), the narrowing timed with them")
	}
	for _, f := range []vulkan.Rounding{vulkan.NoRounding, vulkan.RoundFP16, vulkan.RoundBF16} {
		v, ok := ks.GemmVariantFor(f)
		note := ""
		if !ok {
			note = " (no tensor-core variant on this device: the fp32 kernel)"
		}
		if err := ks.TensorErrors[f]; err != nil {
			note = fmt.Sprintf(" (the tensor-core variant failed to build: %v)", err)
		}
		if err := ks.TensorFallbacks[f]; err != nil {
			note = fmt.Sprintf(" (passed over: %v)", err)
		}
		fmt.Printf("  GEMM with %s operands: %s%s\n", f, v.Name, note)
	}
	runs := gemmRuns(p, variantList)
	if len(runs) == 0 {
		return fmt.Errorf("-variants %q names no GEMM variant this device runs", variantList)
	}
	var shapes []gemmShape
	gpu := p.Type != vulkan.TypeCPU
	ns := []int{1024, 2048, 4096}
	if !gpu {
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
	for _, n := range ns {
		shapes = append(shapes, gemmShape{m: n, n: n, k: n})
	}
	if shapeList == "" && gpu {
		shapes = append(shapes, trainingShapes...)
	} else if shapeList != "" {
		for _, s := range strings.Split(shapeList, ",") {
			sh, err := parseShape(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("-shapes: %w", err)
			}
			shapes = append(shapes, sh)
		}
	}
	// Variant by variant: each tensor-core variant is built and
	// self-checked once (UseGemmVariant), then checked and timed.
	var passed []gemmRun
	var failed []string
	times := map[string][]float64{}
	onePass := map[string][]float64{} // the split shapes' times without split-K
	rng := rand.New(rand.NewPCG(7, 8))
	if check {
		fmt.Println("\nchecks against the CPU (float64 reference; bound γ_{k+2}·(|α|Σ|a||b| + |βc|), u = 2^-24; tensor cores u = 2^-23:")
		fmt.Println("they truncate in fp32 accumulation; their operands are values of their 16-bit format;")
		fmt.Println("split-K into S chunks of at most c values of K: γ_{c+S+1}, u = 2^-24)")
	}
	built := map[string]error{} // by tensor-core variant: UseGemmVariant's error
	var bs buffers
	defer bs.free()
	ops := make([]operands, len(shapes))
	for i, sh := range shapes {
		if ops[i], err = shapeOperands(d, &bs, sh); err != nil {
			return fmt.Errorf("operands of %s: %w", sh, err)
		}
	}
	for _, g := range runs {
		if g.operands != vulkan.NoRounding {
			err, done := built[g.variant.Name]
			if !done {
				err = ks.UseGemmVariant(g.variant)
				built[g.variant.Name] = err
				if err != nil {
					fmt.Printf("  FAIL %v (left out of the timings)\n", err)
				}
			}
			if err != nil {
				failed = append(failed, g.name)
				continue
			}
		}
		if check {
			if err := checkRun(ks, rng, g); err != nil {
				if g.operands == vulkan.NoRounding {
					return err
				}
				fmt.Printf("  FAIL %v (left out of the timings)\n", err)
				failed = append(failed, g.name)
				continue
			}
		}
		for i, sh := range shapes {
			tf, err := timeGemm(d, ks, sh, ops[i], reps, g, 0)
			if err != nil {
				return fmt.Errorf("timing %s %s: %w", sh, g.name, err)
			}
			times[g.name] = append(times[g.name], tf)
			if chunks, _ := ks.SplitK(sh.args()); chunks > 1 {
				if tf, err = timeGemm(d, ks, sh, ops[i], reps, g, 1); err != nil {
					return fmt.Errorf("timing %s %s in one pass: %w", sh, g.name, err)
				}
				onePass[g.name] = append(onePass[g.name], tf)
			}
		}
		passed = append(passed, g)
	}
	if check {
		if err := roundCheck(d, ks, rng); err != nil {
			return err
		}
	}
	fmt.Println("\nGEMM variants timed:")
	for _, v := range vulkan.GemmVariants() {
		for _, g := range passed {
			if g.variant.Name == v.Name {
				fmt.Printf("  %-28s %v×%v tile, %s\n", v.Name, v.Workgroup[0], v.Workgroup[1], v.About)
				break
			}
		}
	}
	fmt.Println("\nGEMM C = op(A)·op(B), M×N×K, TFLOP/s, best of 3 batches of", reps)
	fmt.Printf("  %-36s", "variant, B")
	for _, sh := range shapes {
		fmt.Printf(" %16s", sh)
	}
	fmt.Println()
	for _, g := range passed {
		fmt.Printf("  %-36s", g.name)
		for _, tf := range times[g.name] {
			fmt.Printf(" %16.3f", tf)
		}
		fmt.Println()
	}
	for _, sh := range shapes {
		if sh.note != "" {
			fmt.Printf("  %s: %s\n", sh, sh.note)
		}
	}
	printSplitK(ks, shapes, passed, times, onePass)
	if len(failed) > 0 {
		return fmt.Errorf("%d GEMM variant runs failed their checks: %s", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

// printSplitK prints, for the shapes Gemm splits K of, each run's
// TFLOP/s with split-K (as Gemm picks it: on the scalar kernel, whatever
// the operands) and in one pass (on the run's variant).
func printSplitK(ks *vulkan.Kernels, shapes []gemmShape, passed []gemmRun, times, onePass map[string][]float64) {
	var split []int // indices into shapes
	for i, sh := range shapes {
		if chunks, _ := ks.SplitK(sh.args()); chunks > 1 {
			split = append(split, i)
		}
	}
	if len(split) == 0 {
		return
	}
	fmt.Println("\nsplit-K: µs a product and TFLOP/s, split (the scalar kernel, chunks of K summed in order) / in one pass (the run's variant)")
	fmt.Printf("  %-36s", "variant, B")
	for _, i := range split {
		fmt.Printf(" %32s", shapes[i])
	}
	fmt.Println()
	for _, g := range passed {
		fmt.Printf("  %-36s", g.name)
		for j, i := range split {
			sh := shapes[i]
			us := func(tf float64) float64 { return 2 * float64(sh.m) * float64(sh.n) * float64(sh.k) / tf / 1e6 }
			split, one := times[g.name][i], onePass[g.name][j]
			fmt.Printf(" %32s", fmt.Sprintf("%.1f µs %.3f / %.1f µs %.3f", us(split), split, us(one), one))
		}
		fmt.Println()
	}
	for _, i := range split {
		chunks, chunk := ks.SplitK(shapes[i].args())
		fmt.Printf("  %s: %d chunks of %d, %d workgroups split, %d in one pass on the scalar kernel\n", shapes[i], chunks, chunk,
			chunks*tiles(shapes[i], 64, 64), tiles(shapes[i], 64, 64))
	}
}

// tiles is how many tm×tn tiles of C shape sh has.
func tiles(sh gemmShape, tm, tn int) int { return ((sh.m + tm - 1) / tm) * ((sh.n + tn - 1) / tn) }

// gemmRun is one way to run a GEMM: a variant, B's storage and the
// operands' format (which picks the tensor-core variant).
type gemmRun struct {
	name     string
	variant  vulkan.GemmVariant
	b16      bool
	half     vulkan.Half
	operands vulkan.Rounding
}

// gemmRuns lists the scalar kernel's three runs and, for each tensor-core
// variant p runs (of those the comma-separated list names, all when it is
// empty), its runs with fp32 and with 16-bit B.
func gemmRuns(p *vulkan.PhysicalDevice, list string) []gemmRun {
	want := func(name string) bool {
		if list == "" {
			return true
		}
		for _, w := range strings.Split(list, ",") {
			if strings.TrimSpace(w) == name {
				return true
			}
		}
		return false
	}
	var runs []gemmRun
	for _, v := range vulkan.GemmVariants() {
		if !v.Supported(p) || !want(v.Name) {
			continue
		}
		if v.Operands == vulkan.NoRounding {
			runs = append(runs,
				gemmRun{name: v.Name + " fp32-B", variant: v},
				gemmRun{name: v.Name + " bf16-B", variant: v, b16: true, half: vulkan.BF16},
				gemmRun{name: v.Name + " fp16-B", variant: v, b16: true, half: vulkan.FP16})
			continue
		}
		half := vulkan.BF16
		if v.Operands == vulkan.RoundFP16 {
			half = vulkan.FP16
		}
		runs = append(runs,
			gemmRun{name: v.Name + " fp32-B", variant: v, operands: v.Operands},
			gemmRun{name: v.Name + " " + half.String() + "-B", variant: v, b16: true, half: half, operands: v.Operands})
	}
	return runs
}

// gemmShape is a GEMM's sizes and transposes, as the engine runs it.
type gemmShape struct {
	m, n, k        int
	transA, transB bool
	note           string
}

// args are the shape's GemmArgs without buffers (packed operands).
func (s gemmShape) args() vulkan.GemmArgs {
	lda, ldb := s.k, s.n
	if s.transA {
		lda = s.m
	}
	if s.transB {
		ldb = s.k
	}
	return vulkan.GemmArgs{M: s.m, N: s.n, K: s.k, TransA: s.transA, TransB: s.transB, Alpha: 1, Lda: lda, Ldb: ldb, Ldc: s.n}
}

func (s gemmShape) String() string {
	t := func(b bool) string {
		if b {
			return "t"
		}
		return ""
	}
	return fmt.Sprintf("%d%s×%d%s×%d", s.m, t(s.transA), s.n, t(s.transB), s.k)
}

// trainingShapes are TinyLlama-1.1B's (d 2048, MLP 5632) products over
// 2048 tokens, as a LoRA step runs them (frozen W: no dW).
var trainingShapes = []gemmShape{
	{m: 2048, n: 5632, k: 2048, transB: true, note: "x·Wᵀ: gate/up projection"},
	{m: 2048, n: 2048, k: 5632, transB: true, note: "x·Wᵀ: down projection"},
	{m: 2048, n: 2048, k: 5632, note: "g·W: gate/up dx"},
	{m: 2048, n: 5632, k: 2048, note: "g·W: down dx"},
	{m: 4096, n: 2048, k: 2048, transB: true, note: "x·Wᵀ: q/o projection, 4096 tokens"},
	// The LoRA adapters' products at rank 8 (A: 8×2048, B: 2048×8): the
	// thin ones, K long and C a few tiles, are split-K's.
	{m: 2048, n: 8, k: 2048, transB: true, note: "x·Aᵀ: LoRA down, rank 8"},
	{m: 2048, n: 2048, k: 8, transB: true, note: "u·Bᵀ: LoRA up, rank 8"},
	{m: 2048, n: 8, k: 2048, note: "dY·B: LoRA du, rank 8"},
	{m: 8, n: 2048, k: 2048, transA: true, note: "(dY·B)ᵀ·x: LoRA dA, rank 8"},
	{m: 2048, n: 8, k: 2048, transA: true, note: "dYᵀ·u: LoRA dB, rank 8"},
	{m: 2048, n: 2048, k: 8, note: "du·A: LoRA dx, rank 8"},
}

// parseShape reads MxNxK, with a t after M (A transposed) or N (B
// transposed): "2048x5632tx2048".
func parseShape(s string) (gemmShape, error) {
	f := strings.Split(strings.ReplaceAll(s, "×", "x"), "x")
	if len(f) != 3 {
		return gemmShape{}, fmt.Errorf("bad shape %q: want MxNxK", s)
	}
	var sh gemmShape
	var err error
	dim := func(x string, t *bool) int {
		if strings.HasSuffix(x, "t") && t != nil {
			*t, x = true, strings.TrimSuffix(x, "t")
		}
		v, e := strconv.Atoi(x)
		if e != nil || v <= 0 {
			err = fmt.Errorf("bad shape %q: size %q", s, x)
		}
		return v
	}
	sh.m, sh.n, sh.k = dim(f[0], &sh.transA), dim(f[1], &sh.transB), dim(f[2], nil)
	return sh, err
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
	fmt.Printf("    features: Vulkan memory model %v, NV cooperativeMatrix %v, KHR cooperativeMatrix %v, bf16 cooperative matrices %v\n",
		p.VulkanMemoryModel, p.CoopMatNVFeature, p.CoopMatKHRFeature, p.BFloat16CoopMat)
	for _, s := range p.CoopMatShapes {
		fmt.Printf("    cooperative-matrix shape %s\n", s)
	}
	if c := p.CoopMat2; p.CooperativeMatrix2NV {
		fmt.Printf("    VK_NV_cooperative_matrix2: workgroup scope %v, flexible dimensions %v, tensor addressing %v, per-element operations %v; workgroups up to %d, dimensions up to %d, %d bytes of shared memory reserved\n",
			c.WorkgroupScope, c.FlexibleDimensions, c.TensorAddressing, c.PerElementOperations, c.MaxWorkgroupSize, c.MaxDimension, c.ReservedSharedMemory)
		for _, s := range c.Shapes {
			fmt.Printf("    flexible shape: granularity %d×%d×%d, %s·%s+%s→%s, scope %d, %d invocations\n",
				s.MGranularity, s.NGranularity, s.KGranularity, s.A, s.B, s.C, s.Result, s.Scope, s.WorkgroupInvocations)
		}
	}
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

// checkRun runs g on the device in every transpose combination and
// compares with the CPU: a 257×193×320 product in one pass and, for a
// tensor-core variant, products across ragged edges, below one tile and
// with fp16 subnormal operands (|a| ≈ 2^-16); for the scalar kernel, a
// LoRA adapter's thin product split as Gemm splits it (split-K).
func checkRun(ks *vulkan.Kernels, rng *rand.Rand, g gemmRun) error {
	sizes := [][5]float64{{257, 193, 320, 1, 1}}
	if g.operands != vulkan.NoRounding {
		sizes = append(sizes, [5]float64{127, 129, 33, 1, 1}, [5]float64{3, 5, 7, 1, 1}, [5]float64{130, 70, 48, 0x1p-16, 1})
	} else {
		sizes = append(sizes, [5]float64{1000, 8, 2048, 1, 0}) // 16 chunks of 128
	}
	for _, sz := range sizes {
		m, n, k, scale, splits := int(sz[0]), int(sz[1]), int(sz[2]), sz[3], int(sz[4])
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			worst, err := gemmCheck(ks, rng, m, n, k, tr[0], tr[1], scale, splits, g)
			if err != nil {
				return fmt.Errorf("GEMM %s %d×%d×%d (A scaled by %g) transA=%v transB=%v: %w", g.name, m, n, k, scale, tr[0], tr[1], err)
			}
			s := ""
			if scale != 1 {
				s = fmt.Sprintf(", A scaled by %g", scale)
			}
			if chunks, chunk := ks.SplitK(vulkan.GemmArgs{M: m, N: n, K: k, Splits: splits}); chunks > 1 {
				s += fmt.Sprintf(", split-K: %d chunks of %d", chunks, chunk)
			}
			fmt.Printf("  GEMM %-36s %d×%d×%d transA=%-5v transB=%-5v ok: worst error %.3f of the bound%s\n", g.name, m, n, k, tr[0], tr[1], worst, s)
		}
	}
	return nil
}

func gemmCheck(ks *vulkan.Kernels, rng *rand.Rand, m, n, k int, ta, tb bool, scale float64, splits int, g gemmRun) (float64, error) {
	return ks.CheckGemm(rng, vulkan.GemmCheck{M: m, N: n, K: k, TransA: ta, TransB: tb,
		B16: g.b16, BHalf: g.half, Operands: g.operands, AScale: scale, Splits: splits})
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

// operands are a shape's A, B and C on the device, made once for every
// run of the shape: B's float32 values -3…3 are read as 16-bit values by
// the runs with 16-bit B (finite in both formats; the time does not
// depend on them).
type operands struct{ a, b, c *vulkan.Buffer }

// shapeOperands makes the operands of shape sh, into bs.
func shapeOperands(d *vulkan.Device, bs *buffers, sh gemmShape) (operands, error) {
	fill := func(size int) []float32 {
		x := make([]float32, size)
		for i := range x {
			x[i] = float32(i%7) - 3 // exact in every format
		}
		return x
	}
	var o operands
	var err error
	if o.a, err = bs.f32(d, fill(sh.m*sh.k)); err != nil {
		return o, err
	}
	if o.b, err = bs.f32(d, fill(sh.k*sh.n)); err != nil {
		return o, err
	}
	o.c, err = bs.f32(d, make([]float32, sh.m*sh.n))
	return o, err
}

// timeGemm is the best TFLOP/s of 3 batches of reps GEMMs of shape sh
// on its operands o.
// splits is GemmArgs.Splits (0: as Gemm picks; 1: one pass).
func timeGemm(d *vulkan.Device, ks *vulkan.Kernels, sh gemmShape, o operands, reps int, run gemmRun, splits int) (float64, error) {
	m, n, k := sh.m, sh.n, sh.k
	A, B, C := o.a, o.b, o.c
	r, err := d.NewRecorder()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	g := sh.args()
	g.A, g.B, g.C, g.B16, g.BHalf, g.Operands, g.Splits = A, B, C, run.b16, run.half, run.operands, splits
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
	return 2 * float64(m) * float64(n) * float64(k) * float64(reps) / best.Seconds() / 1e12, nil
}

// printStatistics prints the driver's statistics of each embedded shader
// matching the comma-separated patterns, built on p.
func printStatistics(in *vulkan.Instance, p *vulkan.PhysicalDevice, patterns string) error {
	d, err := in.OpenDeviceWith(p, vulkan.DeviceOptions{PipelineStatistics: true})
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Printf("\npipeline statistics on device %d: %s (VK_KHR_pipeline_executable_properties)\n", p.Index, p.Name)
	var names []string
	for _, pat := range strings.Split(patterns, ",") {
		m, err := vulkan.ShaderNames(strings.TrimSpace(pat))
		if err != nil {
			return err
		}
		if len(m) == 0 {
			return fmt.Errorf("-stats: %q matches no embedded shader", pat)
		}
		names = append(names, m...)
	}
	for _, name := range names {
		es, err := d.ShaderExecutables(name)
		if err != nil {
			fmt.Printf("  %s: %v\n", name, err)
			continue
		}
		for _, e := range es {
			var parts []string
			for _, s := range e.Statistics {
				parts = append(parts, s.String())
			}
			fmt.Printf("  %s [%s, subgroup %d]: %s\n", name, e.Name, e.SubgroupSize, strings.Join(parts, "; "))
		}
	}
	return nil
}
