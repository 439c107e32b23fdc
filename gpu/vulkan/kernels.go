package vulkan

import (
	"embed"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/mixtune/mixtune/amp"
)

// shaderFS holds the SPIR-V compiled from shaders/*.comp (see
// shaders/build.txt and scripts/gen_spirv.sh).
//
//go:embed shaders/*.spv
var shaderFS embed.FS

func spirv(name string) ([]byte, error) {
	b, err := shaderFS.ReadFile("shaders/" + name)
	if err != nil {
		return nil, fmt.Errorf("vulkan: embedded shader %s: %w", name, err)
	}
	return b, nil
}

// Half is a 16-bit floating-point format.
type Half int

// The 16-bit formats.
const (
	BF16 Half = iota
	FP16
)

func (h Half) String() string {
	if h == FP16 {
		return "fp16"
	}
	return "bf16"
}

// format is h as amp's format, for the host's conversions.
func (h Half) format() amp.Format {
	if h == FP16 {
		return amp.FP16
	}
	return amp.BF16
}

// GemmVariant is one GEMM implementation: its shaders and what the device
// must report for it to run. Kernel selection takes, for each operand
// format, the first variant in GemmVariants of that format whose
// Supported accepts the device.
type GemmVariant struct {
	Name     string
	Tile     string // the coopTile a tensor-core variant is built of ("" for the scalar variant)
	F32, B16 string // SPIR-V file names under shaders/
	// A16 is the build that reads both operands as 16-bit values of the
	// variant's format (a tensor-core variant only): with
	// KernelOptions.Narrow16 Gemm narrows each fp32 operand once, into the
	// recorder's scratch (round16.comp), and runs every product of the
	// format on it (narrowOperands).
	A16 string
	// Aligned16 (the coopmat2 variants): a 16-bit B whose offset is not a
	// multiple of 8 values (16 bytes) runs on the fp32 variant instead;
	// gemm_cm2.comp's tensor layouts need that alignment.
	Aligned16 bool
	Q4        string // the 4-bit weight variant (built on first use; the scalar variant only)
	// SplitF32 and SplitB16 are the split-K builds (fp32 and 16-bit B;
	// built on first use; the scalar variant only): see splitk.go.
	SplitF32, SplitB16 string
	// Operands is the format the variant multiplies in: NoRounding (fp32)
	// for a general GEMM; RoundFP16 or RoundBF16 for a tensor-core one,
	// which narrows op(A) and op(B) to that format and so runs only the
	// products whose operands already are such values (GemmArgs.Operands)
	// and 16-bit B only of its format.
	Operands  Rounding
	Supported func(*PhysicalDevice) bool
	Workgroup [2]uint32 // the C tile one workgroup computes, M × N
	About     string    // how the workgroup is laid out, for vkprobe
}

// The tensor-core kernels' fragment shape (gemm_coopmat.comp).
const coopM, coopN, coopK = 16, 16, 16

// defaultCoopTile names the coopTile whose variants GemmVariants lists
// first for each 16-bit format, so ChooseGemmFor takes them where the
// device runs them (vkprobe times every tile). 128×256: on an H100 it ran
// the base's bf16 products 1.3–1.4× faster than 128×128 and TinyLlama's
// LoRA step 1.14× (docs/gpus.md); a device that cannot hold it takes the
// first tile that fits.
const defaultCoopTile = "128x256"

// defaultCM2Tile names the coopmat2 tile NewKernels tries first for each
// 16-bit format where the device runs it, before ChooseGemmFor's coopmat1
// variant (tensorChoices). On an H100 (2026-11-27, docs/gpus.md) it ran
// the base's bf16 products at 46–61 TFLOP/s against coopmat1's 38–44 and
// TinyLlama's bf16 LoRA step 1.09× faster; cm2-128x128 ran them slower
// than either and is taken only by name.
const defaultCM2Tile = "cm2-128x256"

// coopTile is one build of gemm_coopmat.comp (shaders/build.txt): the
// workgroup's tile of C, its invocations (subgroups of 32) and its K step.
type coopTile struct {
	name        string // in the variants' names and SPIR-V file names
	m, n, k     uint32
	invocations uint32
	about       string
}

// coopTiles are gemm_coopmat.comp's builds.
func coopTiles() []coopTile {
	return []coopTile{
		{"128x128", 128, 128, 32, 256, "8 subgroups of 64×32"},
		{"128x128s4", 128, 128, 32, 128, "4 subgroups of 64×64"},
		{"128x256", 128, 256, 16, 256, "8 subgroups of 64×64"},
		{"256x128", 256, 128, 16, 256, "8 subgroups of 64×64"},
	}
}

// sharedBytes is the tile's shared memory: two stages of A's m × (k+8)
// and B's k × (n+8) 16-bit values (gemm_coopmat.comp's As and Bs; the C
// scratch lies in As).
func (t coopTile) sharedBytes() uint32 { return 2 * 2 * (t.m*(t.k+8) + t.k*(t.n+8)) }

// spirv is the tile's SPIR-V file for format h ("fp16", "bf16") and B's
// storage ("f32", "b16"); emulated, its -DEMULATE build.
func (t coopTile) spirv(h, b string, emulated bool) string {
	if emulated {
		return fmt.Sprintf("gemm_coopmat_emu_%s_%s_%s.spv", t.name, h, b)
	}
	return fmt.Sprintf("gemm_coopmat_%s_%s_%s.spv", t.name, h, b)
}

// tensorFits reports whether p runs tile t's kernels: Vulkan 1.2 with the
// memory model, subgroups of 32 (the kernel lays its subgroups over its
// invocations by that size), the invocations and the shared memory.
func (p *PhysicalDevice) tensorFits(t coopTile) bool {
	return p.core12 && p.VulkanMemoryModel && p.SubgroupSize == 32 &&
		p.MaxSharedMemory >= t.sharedBytes() && p.MaxWorkgroupInvocations >= t.invocations
}

// tensorFP16 reports whether the fp16 tensor-core GEMM of tile t runs on
// p: tensorFits, VK_NV_cooperative_matrix's feature listing the
// subgroup-scope 16×16×16 fp16·fp16+fp32 shape, and shaderFloat16.
// OpenDevice enables what it needs on such a device.
func (p *PhysicalDevice) tensorFP16(t coopTile) bool {
	return p.tensorFits(t) && p.CoopMatNVFeature && p.ShaderFloat16 &&
		p.HasCoopMat(false, coopM, coopN, coopK, ComponentFP16)
}

// tensorBF16 is tensorFP16 for the bf16 kernel: VK_KHR_cooperative_matrix
// listing the bf16 shape, and VK_KHR_shader_bfloat16 with bf16
// cooperative matrices. Its SPIR-V needs a newer glslang than Debian's
// (scripts/gen_spirv_coopmat.sh): without the embedded file it is off.
func (p *PhysicalDevice) tensorBF16(t coopTile) bool {
	if _, err := shaderFS.Open("shaders/" + t.spirv("bf16", "f32", false)); err != nil {
		return false
	}
	return p.tensorFits(t) && p.CoopMatKHRFeature && p.BFloat16CoopMat &&
		p.HasCoopMat(true, coopM, coopN, coopK, ComponentBF16)
}

// tensorAny reports whether a tensor-core variant for operands of format
// f runs on p (a coopmat2 one too, though only a named tile takes it).
func (p *PhysicalDevice) tensorAny(f Rounding) bool {
	if f == NoRounding {
		return false
	}
	for _, t := range cm2Tiles() {
		if p.tensorCM2(t, f) {
			return true
		}
	}
	return p.coop1Any(f)
}

// coop1Any reports whether a subgroup-scope (coopmat1) tensor-core variant
// of format f runs on p: the extensions OpenDevice enables for them.
func (p *PhysicalDevice) coop1Any(f Rounding) bool {
	for _, t := range coopTiles() {
		if (f == RoundFP16 && p.tensorFP16(t)) || (f == RoundBF16 && p.tensorBF16(t)) {
			return true
		}
	}
	return false
}

// cm2Tile is one build of gemm_cm2.comp (shaders/build_glslang.txt): the
// workgroup's tile of C and K step, as workgroup-scope cooperative
// matrices the driver stages and schedules.
type cm2Tile struct {
	name        string // "cm2-" and the tile, in CoopTileNames
	m, n, k     uint32
	invocations uint32
}

// cm2Tiles are gemm_cm2.comp's builds: llama.cpp's coopmat2 tiles for
// large products on NVIDIA (256 invocations, K step 64). The "u8" tiles
// write out eight K steps a trip of their loop, as llama.cpp's does;
// 256x128 is llama.cpp's large tile as it lies in mixtune's products
// (its 128 rows of weights by 256 tokens are 256 tokens by 128 output
// columns here). They are named apart, not the default, until a GPU has
// measured them end to end.
func cm2Tiles() []cm2Tile {
	return []cm2Tile{
		{"cm2-128x256", 128, 256, 64, 256},
		{"cm2-128x128", 128, 128, 64, 256},
		{"cm2-128x256u8", 128, 256, 64, 256},
		{"cm2-256x128u8", 256, 128, 64, 256},
	}
}

// spirv is the tile's SPIR-V for format h ("fp16", "bf16").
func (t cm2Tile) spirv(h string) string {
	return fmt.Sprintf("gemm_cm2_%s_%s.spv", strings.TrimPrefix(t.name, "cm2-"), h)
}

// tensorCM2 reports whether gemm_cm2.comp's build of tile t for format f
// runs on p: Vulkan 1.3 (SPIR-V 1.6) with the memory model,
// VK_NV_cooperative_matrix2's workgroup scope, flexible dimensions,
// tensor addressing and per-element operations, VK_KHR_cooperative_matrix,
// the format's 16-bit type, and a listed workgroup-scope shape of f·f+fp32
// for the tile's invocations whose granularities divide the tile.
func (p *PhysicalDevice) tensorCM2(t cm2Tile, f Rounding) bool {
	h, comp := "fp16", ComponentFP16
	if f == RoundBF16 {
		h, comp = "bf16", ComponentBF16
	}
	if _, err := shaderFS.Open("shaders/" + t.spirv(h)); err != nil {
		return false
	}
	c := &p.CoopMat2
	if !p.core13 || !p.VulkanMemoryModel || !p.CooperativeMatrix2NV || !p.CooperativeMatrixKHR || !p.CoopMatKHRFeature ||
		!c.WorkgroupScope || !c.FlexibleDimensions || !c.TensorAddressing || !c.PerElementOperations ||
		c.MaxWorkgroupSize < t.invocations || p.MaxWorkgroupInvocations < t.invocations ||
		c.MaxDimension < max(t.m, t.n, t.k) || p.MaxSharedMemory < c.ReservedSharedMemory {
		return false
	}
	if (f == RoundFP16 && !p.ShaderFloat16) || (f == RoundBF16 && !p.BFloat16CoopMat) {
		return false
	}
	for _, s := range c.Shapes {
		if s.A == comp && s.B == comp && s.C == ComponentFP32 && s.Result == ComponentFP32 && s.Scope == scopeWorkgroup &&
			s.WorkgroupInvocations == t.invocations && s.MGranularity > 0 && s.NGranularity > 0 && s.KGranularity > 0 &&
			t.m%s.MGranularity == 0 && t.n%s.NGranularity == 0 && t.k%s.KGranularity == 0 {
			return true
		}
	}
	return false
}

// cm2Any reports whether a coopmat2 variant of either format runs on p.
func (p *PhysicalDevice) cm2Any() bool {
	for _, t := range cm2Tiles() {
		if p.tensorCM2(t, RoundFP16) || p.tensorCM2(t, RoundBF16) {
			return true
		}
	}
	return false
}

// GemmVariants lists the GEMM implementations, best first: tensor-core
// variants (llama.cpp's coopmat1 pattern: a workgroup tile in shared
// memory, multiplied by subgroup-scope 16×16×16 fragments) for products
// whose operands are 16-bit values, for each format every coopTile with
// defaultCoopTile's first, then the scalar tiled kernel, which runs
// everything.
func GemmVariants() []GemmVariant {
	tiles := coopTiles()
	for i, t := range tiles {
		if t.name == defaultCoopTile {
			tiles[0], tiles[i] = tiles[i], tiles[0]
		}
	}
	var vs []GemmVariant
	for _, f := range []struct {
		api, h string
		r      Rounding
		ok     func(*PhysicalDevice, coopTile) bool
	}{{"khr", "bf16", RoundBF16, (*PhysicalDevice).tensorBF16}, {"nv", "fp16", RoundFP16, (*PhysicalDevice).tensorFP16}} {
		for _, t := range tiles {
			vs = append(vs, GemmVariant{
				Name: fmt.Sprintf("coopmat-%s-%s-%s", f.api, f.h, t.name),
				Tile: t.name,
				F32:  t.spirv(f.h, "f32", false), B16: t.spirv(f.h, "b16", false), A16: t.spirv(f.h, "a16", false),
				Operands:  f.r,
				Supported: func(p *PhysicalDevice) bool { return f.ok(p, t) },
				Workgroup: [2]uint32{t.m, t.n},
				About:     fmt.Sprintf("%d invocations (%s), K step %d, %d bytes of shared memory", t.invocations, t.about, t.k, t.sharedBytes()),
			})
		}
	}
	// The coopmat2 variants (GL_NV_cooperative_matrix2's workgroup-scope
	// matrices) after them: ChooseGemmFor passes them over; NewKernels
	// tries defaultCM2Tile's first (tensorChoices), and KernelOptions.CoopTile
	// "cm2-…" picks any (vkprobe times them). They read 16-bit operands
	// only: Gemm narrows fp32 ones first.
	for _, f := range []struct {
		h string
		r Rounding
	}{{"bf16", RoundBF16}, {"fp16", RoundFP16}} {
		for _, t := range cm2Tiles() {
			vs = append(vs, GemmVariant{
				Name:      fmt.Sprintf("coopmat2-nv-%s-%s", f.h, strings.TrimPrefix(t.name, "cm2-")),
				Tile:      t.name,
				A16:       t.spirv(f.h),
				Aligned16: true,
				Operands:  f.r,
				Supported: func(p *PhysicalDevice) bool { return p.tensorCM2(t, f.r) },
				Workgroup: [2]uint32{t.m, t.n},
				About:     fmt.Sprintf("%d invocations, workgroup-scope matrices, K step %d, operands narrowed first", t.invocations, t.k),
			})
		}
	}
	return append(vs, GemmVariant{
		Name: "scalar-tiled-64x64",
		F32:  "gemm_f32.spv", B16: "gemm_b16.spv", Q4: "gemm_q4.spv",
		SplitF32: "gemm_splitk_f32.spv", SplitB16: "gemm_splitk_b16.spv",
		Operands: NoRounding,
		// 8.5 KiB of shared memory and 256 invocations: every Vulkan device.
		Supported: func(p *PhysicalDevice) bool { return p.MaxSharedMemory >= 8704 && p.MaxWorkgroupInvocations >= 256 },
		Workgroup: [2]uint32{64, 64},
		About:     "256 invocations, fp32 fmas",
	})
}

// ChooseGemm is the first of GemmVariants for fp32 operands that p supports.
func ChooseGemm(p *PhysicalDevice) (GemmVariant, error) { return ChooseGemmFor(p, NoRounding) }

// ChooseGemmFor is the first of GemmVariants for operands of format f that
// p supports, the coopmat2 ones left out (NewKernels tries the default
// coopmat2 tile before it: tensorChoices), or an error when there is none
// (Kernels then runs those products on the fp32 variant, with the same
// values).
func ChooseGemmFor(p *PhysicalDevice, f Rounding) (GemmVariant, error) {
	for _, v := range GemmVariants() {
		if v.Operands == f && !v.Aligned16 && v.Supported(p) {
			return v, nil
		}
	}
	return GemmVariant{}, fmt.Errorf("vulkan: no %s GEMM variant runs on %s", f, p.Name)
}

// chooseTensor is ChooseGemmFor for 16-bit operands f on tile (a
// CoopTileNames name), where p runs it; "" is ChooseGemmFor's choice (the
// default tile, or the first that fits).
func chooseTensor(p *PhysicalDevice, f Rounding, tile string) (GemmVariant, error) {
	if tile == "" {
		return ChooseGemmFor(p, f)
	}
	for _, v := range GemmVariants() {
		if v.Operands == f && v.Tile == tile && v.Supported(p) {
			return v, nil
		}
	}
	return GemmVariant{}, fmt.Errorf("vulkan: no %s GEMM variant of tile %s runs on %s", f, tile, p.Name)
}

// tensorChoices lists, best first, the tensor-core variants NewKernels
// tries for products with operands of format f on p: the tile named (a
// CoopTileNames name) alone, or with none named the defaultCM2Tile
// variant where p runs it, then ChooseGemmFor's. The first that builds
// and passes its self-check on the device runs them; a driver that
// rejects workgroup-scope matrices, or a coopmat2 build that fails its
// check, leaves them on coopmat1.
func tensorChoices(p *PhysicalDevice, f Rounding, tile string) ([]GemmVariant, error) {
	if tile != "" {
		v, err := chooseTensor(p, f, tile)
		if err != nil {
			return nil, err
		}
		return []GemmVariant{v}, nil
	}
	var vs []GemmVariant
	if v, err := chooseTensor(p, f, defaultCM2Tile); err == nil {
		vs = append(vs, v)
	}
	v, err := ChooseGemmFor(p, f)
	if err == nil {
		vs = append(vs, v)
	}
	if len(vs) == 0 {
		return nil, err
	}
	return vs, nil
}

// firstBuilt is the kernels of the first of choices that build builds
// (and self-checks), with why each one before it was passed over, or why
// none was taken.
func firstBuilt(choices []GemmVariant, build func(GemmVariant) (gemmKernels, error)) (gemmKernels, []error, error) {
	var passed []error
	for _, v := range choices {
		t, err := build(v)
		if err == nil {
			return t, passed, nil
		}
		passed = append(passed, fmt.Errorf("%s: %w", v.Name, err))
	}
	if len(passed) == 0 {
		return gemmKernels{}, nil, fmt.Errorf("no tensor-core variant to build")
	}
	return gemmKernels{}, nil, joinErrors(passed)
}

// joinErrors is errs as one error, its messages joined by "; " (one
// line, for GemmNames and the engine's banner).
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return joinedErrors(errs)
}

type joinedErrors []error

func (e joinedErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e joinedErrors) Unwrap() []error { return e }

// gemmKernels are one variant's kernels: fp32 B and 16-bit B, or with
// KernelOptions.Narrow16 a16 alone (both operands 16-bit; Gemm narrows).
type gemmKernels struct {
	v             GemmVariant
	f32, b16, a16 *Kernel
}

// Kernels are the package's compute kernels built for one device.
type Kernels struct {
	d       *Device
	Variant GemmVariant // the GEMM variant chosen for fp32 operands
	// gemm holds the GEMM kernels by operand format: NoRounding always,
	// RoundFP16 and RoundBF16 where a tensor-core variant runs.
	gemm map[Rounding]gemmKernels
	// TensorErrors holds, by operand format, why a tensor-core variant the
	// device supports could not be built (its products run in fp32).
	TensorErrors map[Rounding]error
	// TensorFallbacks holds, by operand format, why the variants tried
	// before the one in use were passed over (tensorChoices).
	TensorFallbacks map[Rounding]error
	// noSplitK keeps every product in one pass over K (KernelOptions).
	noSplitK bool
	// narrow16 runs the tensor-core products on their variants' A16
	// builds, operands narrowed first (KernelOptions.Narrow16).
	narrow16 bool
	attn     attnTensor // attention's tensor-core kernels (attention_coop.go)
	// splitDKV runs the tensor-core dK/dV kernel as two dispatches, dK's
	// and dV's (KernelOptions.SplitDKV).
	splitDKV bool
	// attnKeepMax bounds the device memory those keep scores in
	// (attnKept): attnKeepMaxFor; tests set 0 to have them compute the
	// scores again instead.
	attnKeepMax uint64
	round16     *Kernel
	adamw       *Kernel
	rmsnorm     *Kernel

	mu   sync.Mutex
	lazy map[string]*Kernel // built on first use (Kernels.kernel)
}

const (
	gemmPush   = 14 * 4
	gemmQ4Push = 24 * 4
	roundPush  = 4 * 4
	adamPush   = 10 * 4
	rmsPush    = 3 * 4
)

// KernelOptions are choices NewKernelsWith takes.
type KernelOptions struct {
	// ScalarGEMM runs every product on the fp32 variant, leaving the
	// tensor cores unused (to compare with them).
	ScalarGEMM bool
	// NoSplitK keeps every product in one pass over K: no split-K for
	// products with few tiles of C and a long K (splitk.go), to compare
	// with it. A GemmArgs.Splits other than 0 overrides it.
	NoSplitK bool
	// CoopTile names the tensor-core tile (CoopTileNames) the 16-bit
	// products run on, where the device runs it (else they run in fp32,
	// and TensorErrors says why); "" the default (tensorChoices: the
	// coopmat2 tile where the device runs it, else ChooseGemmFor's). It
	// is for measuring the tiles end to end: vkprobe times them product
	// by product only.
	CoopTile string
	// TensorFormats lists the 16-bit operand formats whose tensor-core
	// kernels (GEMM and attention) are built and self-checked; nil builds
	// every format the device runs. A training run names only its
	// precision's format (none in fp32): on a fresh machine the driver
	// compiles each pipeline first (35 s for an H100 engine with both
	// formats), and a product of a format not built runs on the fp32
	// kernel, with the same values.
	TensorFormats []Rounding
	// Narrow16 narrows the fp32 operands of each 16-bit product to 16-bit
	// values once, into scratch memory, and runs the product on its
	// tensor-core variant's A16 build, whose K steps only copy: the
	// default builds narrow every element of A (and of fp32 B) once for
	// each tile of C that reads it. The same values reach the tensor
	// cores either way, and the same fragments in the same order sum
	// them, so the bits are the same (TestGemmNarrow16); what differs is
	// the time, which only a GPU measures (vkprobe times both).
	Narrow16 bool
	// SplitDKV runs the tensor-core attention's dK/dV kernel as two
	// kernels, one for dK and one for dV, where both are wanted: each
	// holds one set of accumulators (the joint kernel's 149 registers an
	// invocation on an H100 let an SM hold one workgroup), at the cost of
	// reading the kept scores twice. Each value is computed as the joint
	// kernel computes it, so the bits are the same
	// (TestAttentionCoopEmulated); BenchmarkAttention times both, and it
	// stays off by default until a GPU has measured it faster.
	SplitDKV bool
}

// buildsTensor reports whether o asks for the tensor-core kernels of
// 16-bit operands of format f.
func (o KernelOptions) buildsTensor(f Rounding) bool {
	return !o.ScalarGEMM && (o.TensorFormats == nil || slices.Contains(o.TensorFormats, f))
}

// CoopTileNames lists the tensor-core tiles KernelOptions.CoopTile takes,
// the default first.
func CoopTileNames() []string {
	names := []string{defaultCoopTile}
	for _, t := range coopTiles() {
		if t.name != defaultCoopTile {
			names = append(names, t.name)
		}
	}
	for _, t := range cm2Tiles() {
		names = append(names, t.name)
	}
	return names
}

// NewKernels builds every kernel for d, with the GEMM variants
// tensorChoices lists for each 16-bit operand format.
func NewKernels(d *Device) (*Kernels, error) { return NewKernelsWith(d, KernelOptions{}) }

// NewKernelsWith is NewKernels with options.
func NewKernelsWith(d *Device, o KernelOptions) (*Kernels, error) {
	v, err := ChooseGemm(d.Physical)
	if err != nil {
		return nil, err
	}
	ks := &Kernels{d: d, Variant: v, gemm: map[Rounding]gemmKernels{}, noSplitK: o.NoSplitK, narrow16: o.Narrow16, splitDKV: o.SplitDKV, attnKeepMax: attnKeepMaxFor(d.Physical)}
	type spec struct {
		dst  **Kernel
		file string
		bufs int
		push int
	}
	specs := []spec{
		{&ks.round16, "round16.spv", 2, roundPush},
		{&ks.adamw, "adamw.spv", 4, adamPush},
		{&ks.rmsnorm, "rmsnorm.spv", 3, rmsPush},
	}
	g := gemmKernels{v: v}
	specs = append(specs, spec{&g.f32, v.F32, 3, gemmPush}, spec{&g.b16, v.B16, 3, gemmPush})
	build := func(s spec) error {
		code, err := spirv(s.file)
		if err == nil {
			*s.dst, err = d.NewKernel(KernelSpec{Name: s.file, SPIRV: code, Buffers: s.bufs, PushSize: s.push})
		}
		return err
	}
	for _, s := range specs {
		if err := build(s); err != nil {
			ks.gemm[NoRounding] = g
			ks.Close()
			return nil, err
		}
	}
	ks.gemm[NoRounding] = g
	// The tensor-core variants: a driver that rejects one, or a variant
	// that fails its self-check on the device, leaves its products on the
	// fp32 kernel (TensorErrors says why).
	if o.CoopTile != "" && !slices.Contains(CoopTileNames(), o.CoopTile) {
		ks.Close()
		return nil, fmt.Errorf("vulkan: no tensor-core tile %q (tiles: %s)", o.CoopTile, strings.Join(CoopTileNames(), ", "))
	}
	for _, f := range []Rounding{RoundFP16, RoundBF16} {
		if !o.buildsTensor(f) {
			continue
		}
		if !d.Physical.tensorAny(f) {
			continue // none: those products run in fp32
		}
		if ks.TensorErrors == nil {
			ks.TensorErrors = map[Rounding]error{}
		}
		choices, err := tensorChoices(d.Physical, f, o.CoopTile)
		if err != nil { // the tile asked for does not run here
			ks.TensorErrors[f] = err
			continue
		}
		t, passed, err := firstBuilt(choices, ks.buildTensor)
		if err != nil {
			ks.TensorErrors[f] = err
			continue
		}
		ks.gemm[f] = t
		if len(passed) > 0 {
			if ks.TensorFallbacks == nil {
				ks.TensorFallbacks = map[Rounding]error{}
			}
			ks.TensorFallbacks[f] = joinErrors(passed)
		}
	}
	ks.chooseAttention()
	return ks, nil
}

// buildTensor builds tensor-core variant v's kernels and self-checks
// them on the device, closing them on failure.
func (ks *Kernels) buildTensor(v GemmVariant) (gemmKernels, error) {
	t := gemmKernels{v: v}
	err := ks.d.tensorErr
	type build struct {
		dst  **Kernel
		file string
	}
	if err == nil && v.Aligned16 {
		err = ks.d.cm2Err
	}
	builds := []build{{&t.f32, v.F32}, {&t.b16, v.B16}}
	if ks.narrow16 || (v.F32 == "" && v.B16 == "") {
		if v.A16 == "" {
			return gemmKernels{}, fmt.Errorf("no build that reads 16-bit operands (KernelOptions.Narrow16)")
		}
		builds = []build{{&t.a16, v.A16}}
	}
	for _, k := range builds {
		if err != nil {
			break
		}
		var code []byte
		if code, err = spirv(k.file); err == nil {
			*k.dst, err = ks.d.NewKernel(KernelSpec{Name: k.file, SPIRV: code, Buffers: 3, PushSize: gemmPush})
		}
	}
	if err == nil {
		err = ks.selfCheck(v.Operands, t)
	}
	if err != nil {
		t.close()
		return gemmKernels{}, err
	}
	return t, nil
}

func (g gemmKernels) close() {
	for _, k := range []*Kernel{g.f32, g.b16, g.a16} {
		if k != nil {
			k.Close()
		}
	}
}

// UseGemmVariant gives the products of tensor-core variant v's operand
// format to v in place of the variant NewKernels chose (vkprobe times
// every variant this way): it builds v's kernels and self-checks them on
// the device first, and on an error keeps the variant in use. It closes
// the replaced variant's kernels: call it with no recorded, unsubmitted
// GEMM of that format.
func (ks *Kernels) UseGemmVariant(v GemmVariant) error {
	if v.Operands == NoRounding {
		return fmt.Errorf("vulkan: %s is not a tensor-core variant", v.Name)
	}
	if !v.Supported(ks.d.Physical) {
		return fmt.Errorf("vulkan: %s does not run on %s", v.Name, ks.d.Physical.Name)
	}
	t, err := ks.buildTensor(v)
	if err != nil {
		return fmt.Errorf("vulkan: %s: %w", v.Name, err)
	}
	if old, ok := ks.gemm[v.Operands]; ok {
		old.close()
	}
	ks.gemm[v.Operands] = t
	delete(ks.TensorErrors, v.Operands)
	delete(ks.TensorFallbacks, v.Operands)
	return nil
}

// GemmNames names the GEMM variants in use: the fp32 one, then each
// tensor-core one with the operands it takes ("scalar-tiled-64x64, fp16
// products on coopmat-nv-fp16-128x128"), and ", split-K off" where
// KernelOptions.NoSplitK is set.
func (ks *Kernels) GemmNames() string {
	s := ks.Variant.Name
	for _, f := range []Rounding{RoundFP16, RoundBF16} {
		if g, ok := ks.gemm[f]; ok {
			s += fmt.Sprintf(", %s products on %s", f, g.v.Name)
			if err := ks.TensorFallbacks[f]; err != nil {
				s += fmt.Sprintf(" (passed over: %v)", err)
			}
		} else if err := ks.TensorErrors[f]; err != nil {
			s += fmt.Sprintf(", %s products off the tensor cores (%v)", f, err)
		}
	}
	if ks.noSplitK {
		s += ", split-K off"
	}
	if ks.narrow16 {
		s += ", operands narrowed first"
	}
	return s
}

// GemmVariantFor is the variant Gemm runs products with operands of format
// f on, and whether there is one of that format (else they run on
// Variant, the fp32 one).
func (ks *Kernels) GemmVariantFor(f Rounding) (GemmVariant, bool) {
	g, ok := ks.gemm[f]
	if !ok {
		return ks.Variant, false
	}
	return g.v, true
}

// Close destroys the kernels.
func (ks *Kernels) Close() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	all := []*Kernel{ks.round16, ks.adamw, ks.rmsnorm}
	for _, g := range ks.gemm {
		all = append(all, g.f32, g.b16, g.a16)
	}
	for _, k := range all {
		if k != nil {
			k.Close()
		}
	}
	ks.gemm = nil
	for _, k := range ks.lazy {
		k.Close()
	}
	ks.lazy = nil
}

// kernel returns the kernel compiled from the embedded shaders/file,
// binding bufs buffers with push bytes of push constants, building it on
// first use: a run builds only the kernels its graph needs (lavapipe
// compiles a pipeline in 14-240 ms).
func (ks *Kernels) kernel(file string, bufs, push int) (*Kernel, error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if k, ok := ks.lazy[file]; ok {
		return k, nil
	}
	code, err := spirv(file)
	if err != nil {
		return nil, err
	}
	k, err := ks.d.NewKernel(KernelSpec{Name: file, SPIRV: code, Buffers: bufs, PushSize: push})
	if err != nil {
		return nil, err
	}
	if ks.lazy == nil {
		ks.lazy = map[string]*Kernel{}
	}
	ks.lazy[file] = k
	return k, nil
}

// pushWords packs 32-bit push constants: uint32, int, float32 or bool
// (as 0 or 1) values, in order.
func pushWords(vs ...any) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		var w uint32
		switch x := v.(type) {
		case uint32:
			w = x
		case int:
			w = uint32(x)
		case float32:
			w = math.Float32bits(x)
		case bool:
			if x {
				w = 1
			}
		default:
			panic(fmt.Sprintf("vulkan: push constant of type %T", v))
		}
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// groups1D is how many 256-wide workgroups a grid-stride kernel over n
// items dispatches.
func (ks *Kernels) groups1D(n int) uint32 {
	return max(1, min((uint32(n)+255)/256, ks.d.Physical.MaxWorkgroupCount[0], 65535))
}

// GemmArgs describe C = Alpha·op(A)·op(B) + Beta·C over row-major matrices
// in buffers, at element offsets. op(A) is M×K, stored M×K with leading
// dimension Lda (K×M when TransA); op(B) is K×N, stored K×N with Ldb (N×K
// when TransB); C is M×N with Ldc. With Beta == 0 C is not read. B holds
// float32 values, or 16-bit ones of format BHalf when B16 is set, or is
// a 4-bit weight's blob when Q4 is set (B's elements are then the
// weight's, dequantized as the kernel loads them; such products run on
// the scalar variant).
//
// Operands says which format every value of op(A) and op(B) already has
// (the precision policy rounded them there): RoundFP16 or RoundBF16 lets
// Gemm run the product on that format's tensor-core variant, where the
// device has one, exact in its products and fp32 in its sums like the
// fp32 kernel (only the summation order differs). NoRounding, the zero
// value, keeps the fp32 kernel: fp32 products never go to 16-bit tensor
// cores.
type GemmArgs struct {
	M, N, K          int
	TransA, TransB   bool
	Alpha, Beta      float32
	A, B, C          *Buffer
	Lda, Ldb, Ldc    int
	AOff, BOff, COff int
	B16              bool
	BHalf            Half
	Operands         Rounding
	Q4               *Q4Weight
	// Splits is how many chunks of K the product is split into (split-K,
	// splitk.go): 0 lets Gemm choose from the shape (Kernels.SplitK), 1
	// keeps one pass, more asks for up to that many chunks. A split
	// product runs on the scalar variant, whatever Operands says (the same
	// values: exact products, fp32 sums); 4-bit B is never split.
	Splits int
}

// Q4Weight says where a frozen 4-bit weight's parts lie in the buffer
// holding its blob (quant.Tensor.Encode uploaded as it is; the byte
// offsets are quant.BlobLayout's) and how its values are computed: element
// e is Code[nibble e] × its block's absmax (nested: NestedCode[absmax code]
// × NestedAbsmax[block / NestedBlock] + Offset), rounded to Round.
type Q4Weight struct {
	Elements                  int // the weight's element count
	Code, Absmax, NestedCode  int // byte offsets; Absmax -1 when nested, NestedCode -1 when not
	NestedAbsmax, AbsmaxCodes int // byte offsets (nested only; else -1)
	Packed                    int // byte offset of the packed codes
	Block, NestedBlock        int
	Nested                    bool
	Offset                    float32
	Round                     Rounding // the compute format of the product
}

// check reports a layout that does not fit buf's size bytes, whose float
// parts are unaligned, or whose sizes are not positive.
func (q *Q4Weight) check(size uint64) error {
	if q.Elements <= 0 || q.Block <= 0 || (q.Nested && q.NestedBlock <= 0) || q.Round > RoundFP16 {
		return fmt.Errorf("4-bit weight: %d elements, blocks of %d, nested blocks of %d, rounding %d", q.Elements, q.Block, q.NestedBlock, q.Round)
	}
	blocks := (q.Elements + q.Block - 1) / q.Block
	type part struct {
		name      string
		off, size int
		float     bool
	}
	parts := []part{{"code", q.Code, 4 * 16, true}, {"packed codes", q.Packed, (q.Elements + 1) / 2, false}}
	if q.Nested {
		parts = append(parts, part{"nested code", q.NestedCode, 4 * 256, true},
			part{"nested absmax", q.NestedAbsmax, 4 * ((blocks + q.NestedBlock - 1) / q.NestedBlock), true},
			part{"absmax codes", q.AbsmaxCodes, blocks, false})
	} else {
		parts = append(parts, part{"absmax", q.Absmax, 4 * blocks, true})
	}
	for _, pt := range parts {
		if pt.off < 0 || uint64(pt.off)+uint64(pt.size) > size || (pt.float && pt.off%4 != 0) {
			return fmt.Errorf("4-bit weight: %s at byte %d (%d bytes) does not fit a %d-byte buffer 4-byte aligned", pt.name, pt.off, pt.size, size)
		}
	}
	if size > math.MaxUint32 {
		return fmt.Errorf("4-bit weight: a %d-byte blob exceeds the kernel's 32-bit indexing", size)
	}
	return nil
}

// extent checks that a rows×cols row-major matrix with leading dimension
// ld at element offset off fits in buf's size bytes of elem-byte elements.
func extent(name string, buf *Buffer, off, rows, cols, ld, elem int) error {
	if buf == nil || buf.h == 0 {
		return fmt.Errorf("%s: %w", name, ErrFreed)
	}
	if off < 0 || ld < cols || ld < 1 {
		return fmt.Errorf("%s: offset %d, leading dimension %d for %d columns", name, off, ld, cols)
	}
	last := uint64(off) + uint64(rows-1)*uint64(ld) + uint64(cols)
	if last > math.MaxUint32 {
		return fmt.Errorf("%s: %d elements exceed the kernels' 32-bit indexing", name, last)
	}
	if last*uint64(elem) > buf.size {
		return fmt.Errorf("%s: %d×%d (ld %d, offset %d) needs %d bytes; the buffer has %d", name, rows, cols, ld, off, last*uint64(elem), buf.size)
	}
	return nil
}

// Gemm records the GEMM g into r.
func (ks *Kernels) Gemm(r *Recorder, g GemmArgs) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: Gemm %d×%d×%d: %w", g.M, g.N, g.K, err) }
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return wrap(fmt.Errorf("negative size"))
	}
	if g.M == 0 || g.N == 0 {
		return nil
	}
	if g.B16 && g.BHalf != BF16 && g.BHalf != FP16 {
		return wrap(fmt.Errorf("unknown 16-bit format %d", g.BHalf))
	}
	if g.Operands > RoundFP16 {
		return wrap(fmt.Errorf("unknown operand format %d", g.Operands))
	}
	if g.B16 && g.Q4 != nil {
		return wrap(fmt.Errorf("B cannot be both 16-bit and 4-bit"))
	}
	if g.Splits < 0 || (g.Splits > 1 && g.Q4 != nil) {
		return wrap(fmt.Errorf("%d splits of K: want 0 (automatic), 1 or more, and 4-bit B is never split", g.Splits))
	}
	ar, ac := g.M, g.K
	if g.TransA {
		ar, ac = g.K, g.M
	}
	br, bc := g.K, g.N
	if g.TransB {
		br, bc = g.N, g.K
	}
	belem := 4
	if g.B16 {
		belem = 2
	}
	if g.K > 0 {
		if err := extent("A", g.A, g.AOff, ar, ac, g.Lda, 4); err != nil {
			return wrap(err)
		}
		if g.Q4 != nil {
			if g.B == nil || g.B.h == 0 {
				return wrap(fmt.Errorf("B: %w", ErrFreed))
			}
			if err := g.Q4.check(g.B.size); err != nil {
				return wrap(err)
			}
			if g.BOff < 0 || g.Ldb < bc || uint64(g.BOff)+uint64(br-1)*uint64(g.Ldb)+uint64(bc) > uint64(g.Q4.Elements) {
				return wrap(fmt.Errorf("B: %d×%d (ld %d, offset %d) outside the 4-bit weight's %d elements", br, bc, g.Ldb, g.BOff, g.Q4.Elements))
			}
		} else if err := extent("B", g.B, g.BOff, br, bc, g.Ldb, belem); err != nil {
			return wrap(err)
		}
	} else if g.A == nil || g.B == nil { // K = 0: C = beta·C, A and B unread but bound
		return wrap(fmt.Errorf("A and B must be buffers even when K is 0"))
	}
	if err := extent("C", g.C, g.COff, g.M, g.N, g.Ldc, 4); err != nil {
		return wrap(err)
	}
	if g.A == g.C || g.B == g.C {
		return wrap(fmt.Errorf("C must not share a buffer with A or B"))
	}
	if chunks, chunk := ks.SplitK(g); chunks > 1 {
		if err := ks.gemmSplitK(r, g, chunks, chunk); err != nil {
			return wrap(err)
		}
		return nil
	}
	gk := ks.gemmFor(g)
	tile := gk.v.Workgroup
	gx, gy := (uint32(g.N)+tile[1]-1)/tile[1], (uint32(g.M)+tile[0]-1)/tile[0]
	flops := 2 * float64(g.M) * float64(g.N) * float64(g.K)
	k := gk.f32
	var q4Words []uint32 // the 4-bit weight's push constants, after gemm.comp's
	switch {
	case gk.a16 != nil:
		var err error
		if g, err = ks.narrowOperands(r, g, gk.v.Operands); err != nil {
			return wrap(err)
		}
		k = gk.a16
	case g.B16:
		k = gk.b16
	case g.Q4 != nil:
		q := g.Q4
		var err error
		if k, err = ks.kernel(ks.Variant.Q4, 3, gemmQ4Push); err != nil {
			return wrap(err)
		}
		absmax, nestedCode, nestedAbsmax := q.Absmax/4, 0, 0
		if q.Nested {
			absmax, nestedCode, nestedAbsmax = q.AbsmaxCodes, q.NestedCode/4, q.NestedAbsmax/4
		}
		q4Words = []uint32{uint32(q.Code / 4), uint32(absmax), uint32(nestedCode), uint32(nestedAbsmax), uint32(q.Packed),
			uint32(q.Block), uint32(max(q.NestedBlock, 1)), b01(q.Nested), math.Float32bits(q.Offset), uint32(q.Round)}
	}
	push := wordBytes(append(gemmWords(g), q4Words...))
	if err := r.dispatch(k, []*Buffer{g.A, g.B, g.C}, push, gx, gy, 1, flops); err != nil {
		return wrap(err)
	}
	return nil
}

// wordBytes is push constants' bytes from their 32-bit words.
func wordBytes(words []uint32) []byte {
	b := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// b01 is b as a 32-bit push constant.
func b01(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// gemmWords are gemm.comp's push constants for g, up to b16fp16.
func gemmWords(g GemmArgs) []uint32 {
	return []uint32{
		uint32(g.M), uint32(g.N), uint32(g.K), uint32(g.Lda), uint32(g.Ldb), uint32(g.Ldc),
		uint32(g.AOff), uint32(g.BOff), uint32(g.COff), b01(g.TransA), b01(g.TransB),
		math.Float32bits(g.Alpha), math.Float32bits(g.Beta), b01(g.BHalf == FP16),
	}
}

// gemmFor is the variant that runs g: its operands' format's, unless that
// is fp32 or has no variant here, or B's 16-bit bits are of another format.
func (ks *Kernels) gemmFor(g GemmArgs) gemmKernels {
	if g.Operands != NoRounding && g.Q4 == nil { // a 4-bit weight has only the scalar kernel
		if t, ok := ks.gemm[g.Operands]; ok && (!g.B16 || (g.BHalf == FP16) == (g.Operands == RoundFP16)) &&
			!(t.v.Aligned16 && g.B16 && g.BOff%8 != 0) {
			return t
		}
	}
	return ks.gemm[NoRounding]
}

// Round16 records the rounding of n float32 values in x to format h into
// y, as 16-bit values two to a word (the layout Buffer.ReadUint16 reads
// on little-endian hosts), bit for bit what amp.BF16.Bits16 and
// amp.FP16.Bits16 compute.
func (ks *Kernels) Round16(r *Recorder, h Half, x, y *Buffer, n int) error {
	return ks.round16At(r, h, x, 0, y, 0, n)
}

// round16At is Round16 from value xOff of x into y from word yOff.
func (ks *Kernels) round16At(r *Recorder, h Half, x *Buffer, xOff int, y *Buffer, yOff, n int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: Round16 %s of %d values: %w", h, n, err) }
	if h != BF16 && h != FP16 {
		return wrap(fmt.Errorf("unknown 16-bit format %d", h))
	}
	if n < 0 || n > math.MaxUint32-1 {
		return wrap(fmt.Errorf("bad count"))
	}
	if n == 0 {
		return nil
	}
	if err := extent("x", x, xOff, 1, n, n, 4); err != nil {
		return wrap(err)
	}
	words := (n + 1) / 2
	if err := extent("y", y, yOff, 1, words, words, 4); err != nil {
		return wrap(err)
	}
	groups := min((uint32(words)+255)/256, ks.d.Physical.MaxWorkgroupCount[0], 65535)
	push := wordBytes([]uint32{uint32(n), uint32(h), uint32(xOff), uint32(yOff)})
	if err := r.Dispatch(ks.round16, []*Buffer{x, y}, push, groups, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}

// narrowOperands records the narrowing of op(A), and of op(B) unless it
// is 16-bit already, to format f (a tensor-core variant's) into the
// recorder's scratch, and returns g reading those copies, for the
// variant's A16 build: each operand's span from its first to its last
// element, keeping its leading dimension, A's at word 0 and B's after it,
// each starting on 16 bytes (the coopmat kernels' 16-byte loads and
// gemm_cm2.comp's tensor layouts want that). Split-K runs on the scalar
// variant only, so it never comes here.
func (ks *Kernels) narrowOperands(r *Recorder, g GemmArgs, f Rounding) (GemmArgs, error) {
	h := BF16
	if f == RoundFP16 {
		h = FP16
	}
	// span is the elements from an operand's first to its last: rows×cols
	// with leading dimension ld (0 when K is 0: nothing is read).
	span := func(rows, cols, ld int) int {
		if rows == 0 || cols == 0 {
			return 0
		}
		return (rows-1)*ld + cols
	}
	ar, ac, br, bc := g.M, g.K, g.K, g.N
	if g.TransA {
		ar, ac = ac, ar
	}
	if g.TransB {
		br, bc = bc, br
	}
	aSpan := span(ar, ac, g.Lda)
	aWords := (aSpan + 7) / 8 * 4 // whole 16-byte groups: B starts on 16 bytes
	bSpan, bWords := 0, 0
	if !g.B16 {
		bSpan = span(br, bc, g.Ldb)
		bWords = (bSpan + 1) / 2
	}
	if uint64(aWords+bWords)*2 > math.MaxUint32 {
		return g, fmt.Errorf("narrowed operands: %d values exceed the kernels' 32-bit indexing", 2*(aWords+bWords))
	}
	buf, err := r.scratch(4 * uint64(max(aWords+bWords, 1)))
	if err != nil {
		return g, fmt.Errorf("narrowed operands' scratch: %w", err)
	}
	if err := ks.round16At(r, h, g.A, g.AOff, buf, 0, aSpan); err != nil {
		return g, err
	}
	n := g
	n.A, n.AOff = buf, 0
	if !g.B16 {
		if err := ks.round16At(r, h, g.B, g.BOff, buf, aWords, bSpan); err != nil {
			return g, err
		}
		n.B, n.BOff = buf, 2*aWords
		n.B16, n.BHalf = true, h
	}
	return n, nil
}

// AdamWStep is one AdamW step's hyperparameters, as optim.AdamWConfig
// and the learning rate, with the bias corrections 1 − β1^t and
// 1 − β2^t for the parameter's step t, computed by the caller (optim
// computes them in double-double; see optim.powInt).
type AdamWStep struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	BiasCorrection1, BiasCorrection2   float64
}

// AdamW records one AdamW step over n parameters: param, its gradient grad
// and the moments m and v, all fp32, updated in place, in the order and
// with the fused multiply-adds of optim.AdamW (to a few ulps: Vulkan does
// not promise correctly rounded sqrt and division).
func (ks *Kernels) AdamW(r *Recorder, s AdamWStep, param, grad, m, v *Buffer, n int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: AdamW over %d values: %w", n, err) }
	if n < 0 || n > math.MaxUint32 {
		return wrap(fmt.Errorf("bad count"))
	}
	if !(s.BiasCorrection1 > 0 && s.BiasCorrection2 > 0) || !(s.Eps > 0) {
		return wrap(fmt.Errorf("bias corrections %g, %g and eps %g must be positive", s.BiasCorrection1, s.BiasCorrection2, s.Eps))
	}
	if n == 0 {
		return nil
	}
	bufs := []*Buffer{param, grad, m, v}
	for i, b := range bufs {
		if err := extent([]string{"param", "grad", "m", "v"}[i], b, 0, 1, n, n, 4); err != nil {
			return wrap(err)
		}
		for _, o := range bufs[:i] {
			if o == b {
				return wrap(fmt.Errorf("param, grad, m and v must be four buffers"))
			}
		}
	}
	applyDecay := uint32(0)
	if s.WeightDecay != 0 {
		applyDecay = 1
	}
	push := make([]byte, adamPush)
	for i, x := range []uint32{
		uint32(n), applyDecay,
		math.Float32bits(float32(1 - s.LR*s.WeightDecay)),
		math.Float32bits(float32(s.Beta1)), math.Float32bits(float32(1 - s.Beta1)),
		math.Float32bits(float32(s.Beta2)), math.Float32bits(float32(1 - s.Beta2)),
		math.Float32bits(float32(-(s.LR / s.BiasCorrection1))),
		math.Float32bits(float32(math.Sqrt(s.BiasCorrection2))),
		math.Float32bits(float32(s.Eps)),
	} {
		binary.LittleEndian.PutUint32(push[4*i:], x)
	}
	groups := min((uint32(n)+255)/256, ks.d.Physical.MaxWorkgroupCount[0], 65535)
	if err := r.Dispatch(ks.adamw, bufs, push, groups, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}

// RMSNorm records y = w·(x·rstd) row by row, rstd = 1/sqrt(mean(x²) + eps),
// over rows×d values of x (packed rows) with the d weights w, as
// nn.RMSNormRows computes (the sum of squares in fp32 here: see
// shaders/rmsnorm.comp for the bound).
func (ks *Kernels) RMSNorm(r *Recorder, x, w, y *Buffer, rows, d int, eps float64) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: RMSNorm %d×%d: %w", rows, d, err) }
	if rows < 0 || d <= 0 || !(eps >= 0) {
		return wrap(fmt.Errorf("rows must be ≥ 0, d > 0 and eps ≥ 0 (eps %g)", eps))
	}
	if rows == 0 {
		return nil
	}
	if err := extent("x", x, 0, rows, d, d, 4); err != nil {
		return wrap(err)
	}
	if err := extent("w", w, 0, 1, d, d, 4); err != nil {
		return wrap(err)
	}
	if err := extent("y", y, 0, rows, d, d, 4); err != nil {
		return wrap(err)
	}
	if y == x || y == w {
		return wrap(fmt.Errorf("y must not share a buffer with x or w"))
	}
	push := make([]byte, rmsPush)
	binary.LittleEndian.PutUint32(push, uint32(rows))
	binary.LittleEndian.PutUint32(push[4:], uint32(d))
	binary.LittleEndian.PutUint32(push[8:], math.Float32bits(float32(eps)))
	groups := min(uint32(rows), ks.d.Physical.MaxWorkgroupCount[0], 65535)
	if err := r.Dispatch(ks.rmsnorm, []*Buffer{x, w, y}, push, groups, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}
