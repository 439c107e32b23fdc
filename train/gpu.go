package train

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/gpu/vkengine"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// ComputeDevice is compute.device: which engine computes the run.
type ComputeDevice string

// The engines.
const (
	// ComputeAuto takes the Vulkan engine when the device selection chose
	// a GPU that Vulkan also reports (matched by UUID), else the CPU. It
	// never chooses a CPU Vulkan driver (Mesa's lavapipe).
	// It is the empty string, so that resolved.yaml leaves it out and
	// recipes written before the field existed hash as they did.
	ComputeAuto ComputeDevice = ""
	ComputeCPU  ComputeDevice = "cpu" // the CPU kernels (compute.blas)
	ComputeGPU  ComputeDevice = "gpu" // the Vulkan engine, or an error
)

func (d ComputeDevice) String() string {
	if d == ComputeAuto {
		return "auto"
	}
	return string(d)
}

// UnmarshalText parses compute.device.
func (d *ComputeDevice) UnmarshalText(b []byte) error {
	switch s := ComputeDevice(strings.ToLower(strings.TrimSpace(string(b)))); s {
	case "", "auto":
		*d = ComputeAuto
	case ComputeCPU, ComputeGPU:
		*d = s
	default:
		return fmt.Errorf("unknown compute device %q (want auto, cpu or gpu)", b)
	}
	return nil
}

// gpuEngine is an open Vulkan device and its engine.
type gpuEngine struct {
	lib     *vulkan.Library
	inst    *vulkan.Instance
	dev     *vulkan.Device
	eng     *vkengine.Engine
	phys    *vulkan.PhysicalDevice
	variant string // the GEMM variants its kernels use (Kernels.GemmNames)
	// tile is the tensor-core tile of the run's 16-bit products ("" where
	// they run on none) and tileReason why (settleTile).
	tile, tileReason string
	// splitReason says why the tensor-core dK/dV kernel runs as it does
	// where auto timed it (settleSplit).
	splitReason string
	// noRecordAhead: each run recorded into one command buffer.
	noRecordAhead bool
}

func (g *gpuEngine) close() {
	if g == nil {
		return
	}
	if g.eng != nil {
		g.eng.Close()
	}
	if g.dev != nil {
		g.dev.Close()
	}
	if g.inst != nil {
		g.inst.Close()
	}
	if g.lib != nil {
		g.lib.Close()
	}
}

// describe is the banner's and run.json's line for the device.
func (g *gpuEngine) describe() string {
	p := g.phys
	return fmt.Sprintf("%s (%s, %s %s, Vulkan %s, %s) · GEMM %s", p.Name, p.Type, p.DriverName, p.DriverVersionString(), p.VersionString(), p.UUIDString(), g.variant)
}

// openGPU opens the engine compute.device asks for: nil for the CPU,
// with the reason for the choice. sel is the device selection (the
// recipe's device: field); compute.vulkan_device, when set, names a
// Vulkan device directly (an index in Vulkan's order, a UUID or a PCI
// bus id), the only way to choose a CPU driver such as lavapipe. low is
// the run's precision: only its 16-bit format's tensor-core kernels are
// built (tensorFormats).
func openGPU(c ComputeConfig, sel device.Selection, low amp.Format) (*gpuEngine, string, error) {
	if c.Device == ComputeCPU {
		return nil, "compute.device: cpu", nil
	}
	want := c.Device == ComputeGPU
	if c.Device == ComputeAuto && len(sel.GPUs) == 0 && c.VulkanDevice == "" {
		return nil, "auto → cpu: no GPU selected", nil
	}
	fail := func(err error) (*gpuEngine, string, error) {
		if want || c.VulkanDevice != "" {
			return nil, "", err
		}
		return nil, fmt.Sprintf("auto → cpu: %v", err), nil // a GPU Vulkan cannot use is no error for auto
	}
	lib, err := vulkan.Load()
	if err != nil {
		return fail(err)
	}
	g := &gpuEngine{lib: lib}
	if g.inst, err = vulkan.NewInstance(lib, "mixtune"); err != nil {
		g.close()
		return fail(err)
	}
	devs, err := g.inst.PhysicalDevices()
	if err != nil {
		g.close()
		return fail(err)
	}
	pick, reason, err := pickVulkan(devs, c.VulkanDevice, sel)
	if err != nil {
		g.close()
		return fail(err)
	}
	g.phys = pick
	if g.dev, err = g.inst.OpenDevice(pick); err != nil {
		g.close()
		return nil, "", fmt.Errorf("open %s: %w", pick.Name, err)
	}
	if g.eng, err = vkengine.NewWith(g.dev, vulkan.KernelOptions{ScalarGEMM: c.ScalarGEMM, NoSplitK: c.NoSplitK, Narrow16: c.Narrow16, SplitDKV: c.SplitDKV == SplitDKVOn, CoopTile: namedTile(c.GemmTile), TensorFormats: tensorFormats(low)}); err != nil {
		g.close()
		return nil, "", fmt.Errorf("%s: %w", pick.Name, err)
	}
	if c.NoRecordAhead {
		g.eng.RecordAhead(0)
	}
	g.noRecordAhead = c.NoRecordAhead
	g.variant = g.kernelNames()
	return g, reason, nil
}

// kernelNames is the banner's and run.json's account of the kernels in
// use: the GEMM variants, and attention's where its 16-bit products run
// on tensor cores or a self-check kept them off.
func (g *gpuEngine) kernelNames() string {
	s := g.eng.Kernels.GemmNames()
	if g.noRecordAhead {
		s += ", one command buffer a run"
	}
	if a := g.eng.Kernels.AttentionNames(); strings.Contains(a, "products") {
		s += " · " + a
	}
	return s
}

// tensorFormats are the 16-bit product formats a run at precision low
// has, whose tensor-core kernels its engine builds: its own format under
// the bf16 or fp16 policy, none in fp32 (its products' operands are fp32
// values, a 16-bit base widened). Building no others spares the driver
// their compilation on a fresh machine.
func tensorFormats(low amp.Format) []vulkan.Rounding {
	switch low {
	case amp.BF16:
		return []vulkan.Rounding{vulkan.RoundBF16}
	case amp.FP16:
		return []vulkan.Rounding{vulkan.RoundFP16}
	}
	return []vulkan.Rounding{}
}

// pickVulkan chooses the Vulkan device: the one spec names; else the one
// whose UUID is the selected GPU's; else, for compute.device: gpu with
// no GPU selected, the real GPU with the largest device-local heap. A
// CPU driver (lavapipe) is taken only when spec names it.
func pickVulkan(devs []*vulkan.PhysicalDevice, spec string, sel device.Selection) (*vulkan.PhysicalDevice, string, error) {
	if spec != "" {
		d, err := vulkan.Select(devs, spec)
		if err != nil {
			return nil, "", err
		}
		return d, fmt.Sprintf("compute.vulkan_device: %s", spec), nil
	}
	if len(sel.GPUs) > 0 {
		uuid := sel.GPUs[0].UUID
		for _, d := range devs {
			if strings.EqualFold(d.UUIDString(), uuid) {
				return d, fmt.Sprintf("the selected %s, by UUID", uuid), nil
			}
		}
		return nil, "", fmt.Errorf("Vulkan reports no device with the selected GPU's UUID %s", uuid)
	}
	var gpus []*vulkan.PhysicalDevice
	var cpus []string
	for _, d := range devs {
		if d.Type == vulkan.TypeCPU {
			cpus = append(cpus, fmt.Sprintf("%d (%s)", d.Index, d.Name))
			continue
		}
		gpus = append(gpus, d)
	}
	if len(gpus) == 0 {
		msg := "Vulkan reports no GPU"
		if len(cpus) > 0 {
			msg += fmt.Sprintf("; only the CPU driver %s, which compute.vulkan_device must name to be used", strings.Join(cpus, ", "))
		}
		return nil, "", errors.New(msg)
	}
	sort.SliceStable(gpus, func(i, j int) bool { return gpus[i].DeviceLocalBytes > gpus[j].DeviceLocalBytes })
	return gpus[0], "the Vulkan GPU with the most device-local memory", nil
}

// engineName is summary.json's and run.json's engine: "cpu" or
// "vulkan: <device>".
func (c *components) engineName() string {
	if c.gpu == nil {
		return "cpu"
	}
	return "vulkan: " + c.gpu.describe()
}

// settleCompute records in the device selection which engine took the
// selected GPU, once openGPU has decided: "vulkan", or "cpu" with the
// warning that the GPU does no work, and the refusal of a pinned GPU
// that would compute on the CPU without allow_cpu_fallback (device.Select
// leaves both to the trainer when a GPU engine may take the GPU).
func (c *components) settleCompute(r *Recipe) error {
	sel := &c.device.Selection
	if sel.Compute != "gpu" {
		return nil
	}
	if c.gpu != nil {
		sel.Compute = "vulkan"
		return nil
	}
	sel.Compute = device.CPUCompute
	if sel.Pinned && !r.AllowCPUFallback {
		field := "device"
		if len(r.Devices) > 0 {
			field = "devices"
		}
		return r.doc.Errorf(field, "the pinned GPU would do no work: the run computes on the CPU (%s); set allow_cpu_fallback: true to run on the CPU anyway, compute.device: cpu, or make the GPU's Vulkan driver available", c.gpuReason)
	}
	sel.Warnings = append([]string{fmt.Sprintf("compute runs on the CPU (%s): the selected GPU does no work", c.gpuReason)}, sel.Warnings...)
	return nil
}

// rankGPU narrows the device selection to this rank's GPU when several
// ranks of a data-parallel job run on this host: local rank i takes the
// i-th selected GPU (the i-th of devices:, or of auto's ranking). More
// ranks than GPUs, or every rank on the one device compute.vulkan_device
// names, share them only with compute.share_gpu.
func rankGPU(c ComputeConfig, sel device.Selection, local, localSize int) (device.Selection, error) {
	if c.Device == ComputeCPU || localSize <= 1 {
		return sel, nil
	}
	if c.VulkanDevice != "" {
		if !c.ShareGPU {
			return sel, fmt.Errorf("%d ranks on this host would share the one device compute.vulkan_device names (%s); set compute.share_gpu: true to allow it", localSize, c.VulkanDevice)
		}
		return sel, nil
	}
	if len(sel.GPUs) == 0 {
		return sel, nil
	}
	if localSize > len(sel.GPUs) && !c.ShareGPU {
		return sel, fmt.Errorf("%d ranks on this host and %d GPU(s) selected: ranks would share a GPU; pin one per rank with devices:, set compute.share_gpu: true to share, or compute.device: cpu", localSize, len(sel.GPUs))
	}
	g := sel.GPUs[local%len(sel.GPUs)]
	sel.GPUs = []device.GPU{g}
	sel.Reason += fmt.Sprintf("; local rank %d takes %s", local, g.UUID)
	return sel, nil
}

// RankAssignment says which GPU each of ranks ranks on one host takes
// under the recipe, and why, one line per rank, as a data-parallel job
// would assign them (rankGPU); an error where the job would be refused.
func (r *Recipe) RankAssignment(sel device.Selection, ranks int) ([]string, error) {
	if r.Compute.Device == ComputeCPU || len(sel.GPUs) == 0 && r.Compute.VulkanDevice == "" {
		why := "no GPU selected"
		if r.Compute.Device == ComputeCPU {
			why = "compute.device: cpu"
		}
		return []string{fmt.Sprintf("all %d ranks compute on the CPU (%s)", ranks, why)}, nil
	}
	lines := make([]string, ranks)
	for i := range ranks {
		rs, err := rankGPU(r.Compute, sel, i, ranks)
		if err != nil {
			return nil, r.doc.Errorf("compute.share_gpu", "%v", err)
		}
		switch {
		case r.Compute.VulkanDevice != "":
			lines[i] = fmt.Sprintf("rank %d: Vulkan device %s (compute.vulkan_device, shared)", i, r.Compute.VulkanDevice)
		default:
			g := rs.GPUs[0]
			how := fmt.Sprintf("selected GPU %d of %d", i%len(sel.GPUs)+1, len(sel.GPUs))
			if ranks > len(sel.GPUs) {
				how += ", shared (compute.share_gpu)"
			}
			lines[i] = fmt.Sprintf("rank %d: GPU %d (%s, %s): %s", i, g.Index, g.Name, g.UUID, how)
		}
	}
	return lines, nil
}

// memoryError turns a device allocation that failed while the run was
// being built into an error about the recipe: the device's memory is too
// small for it, or one of its values is larger than the largest buffer
// the device makes. Other errors pass through.
func (g *gpuEngine) memoryError(r *Recipe, err error) error {
	var ve *vulkan.Error
	switch {
	case outOfDeviceMemory(err):
		errors.As(err, &ve)
		held, _ := g.dev.MemoryUse()
		hint := ""
		if !r.Compute.ActivationCheckpointing {
			hint = ", recompute each layer in the backward pass (compute.activation_checkpointing: true)"
		}
		return inputError(fmt.Errorf("compute.device: the run does not fit %s's %s of device memory: its buffers held %s when one more could not be made (%v); "+
			"lower train.batch_size or data.seq_len, raising train.grad_accum instead%s, keep the base in 16 bits or 4 (model.base_dtype: bf16, model.quantize: nf4), or compute on the cpu",
			g.phys.Name, gib(g.phys.DeviceLocalBytes), gib(held), ve, hint))
	case errors.Is(err, vulkan.ErrBufferTooLarge):
		return inputError(fmt.Errorf("compute.device: one of the run's values is larger than the largest buffer the device makes (%w); lower train.batch_size or data.seq_len, or compute on the cpu", err))
	}
	return err
}

// outOfDeviceMemory says whether err is the device's running out of
// memory.
func outOfDeviceMemory(err error) bool {
	var ve *vulkan.Error
	return errors.As(err, &ve) && ve.Result == vulkan.ErrorOutOfDeviceMemory
}

// deviceTooSmall says whether err is the device's running out of memory
// or a buffer larger than it makes.
func deviceTooSmall(err error) bool {
	return outOfDeviceMemory(err) || errors.Is(err, vulkan.ErrBufferTooLarge)
}

// deviceDecoder is an fp32 decoder of m, with adapter l unmerged (nil:
// none), on g's device (vkengine.Decoding: the weights, values and
// key/value cache there); share gives weights another program holds
// there (nil: none), read in place. done frees what it holds on the
// device.
func deviceDecoder(m *model.Model, l *peft.Adapter, be blas.Backend, g *gpuEngine, share func(string) *vulkan.Buffer) (d *model.Decoder, done func()) {
	dec := vkengine.NewDecoding(g.eng, share)
	cfg := model.DecodeConfig{Device: func(logits *G.Node, b *nn.Builder, c *nn.KVCache) (model.DecodeProgram, error) {
		p, err := dec.Compile(logits, b, c)
		if err != nil {
			return nil, fmt.Errorf("decode on %s: %w", g.phys.Name, err)
		}
		return p, nil
	}}
	if l != nil {
		cfg.Linear = l.Linear(map[string]*G.Node{})
	}
	d = model.NewDecoderWith(m, nn.NewEngine(be), cfg)
	return d, func() {
		d.Close()
		dec.Close()
	}
}
