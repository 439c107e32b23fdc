package device

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mixtune/mixtune/amp"
)

// Request is what a run asks for: a config's device settings and the CUDA
// environment the process runs in.
type Request struct {
	// Device is one of
	//	auto          the best GPU by Policy that passes the memory checks, else the CPU
	//	cpu           the CPU
	//	cuda:N        the GPU nvidia-smi shows as N (PCI bus order), never CUDA's
	//	              fastest-first order nor a position in CUDA_VISIBLE_DEVICES
	//	GPU-<uuid>    a GPU by UUID or by a prefix that only one UUID has
	//	MIG-<uuid>    a MIG instance by UUID or unique prefix (NVML discovery only)
	//	<PCI bus id>  "00000000:01:00.0", "0000:01:00.0" or "01:00.0" (domain 0)
	// The zero Spec means auto. Case does not matter.
	Device Spec
	// Devices pins several GPUs, each in cuda:N, UUID, MIG or PCI bus id form;
	// it excludes Device.
	Devices []Spec
	// MinFreeMemory and NeedMemory are in bytes, 0 for no requirement. A GPU
	// with less free memory than either is refused (pinned) or passed over
	// (auto). NeedMemory is the run's estimate (parameters, optimizer state,
	// activations) and applies to each device.
	MinFreeMemory uint64
	NeedMemory    uint64
	// Policy ranks GPUs for auto; "" is PolicyTotal.
	Policy Policy
	// Precision is the format the run computes in.
	Precision amp.Format
	// LossScaling is the recipe's choice; with auto, a precision that falls
	// back to fp16 turns loss scaling on.
	LossScaling amp.ScalingMode
	// PrecisionFallback lets bf16 become fp16 with loss scaling on a GPU
	// without bf16, instead of failing.
	PrecisionFallback bool
	// AllowCPUFallback lets a pinned GPU (not auto) run with compute on the
	// CPU. When false such a request fails rather than pretend.
	AllowCPUFallback bool
	// GPUEngine says that a GPU engine may compute on the selected GPUs
	// (mixtune's Vulkan engine, compute.device auto or gpu). Whether it
	// does is known only once the engine opens, so Select then leaves the
	// compute-on-CPU warning and the AllowCPUFallback refusal to the caller
	// (Selection.Pinned says whether a refusal applies); without it a
	// selected GPU is only named to child processes.
	GPUEngine bool
	// Count is how many GPUs auto takes, best first: one per rank of a
	// data-parallel job on this host (0 means 1). Fewer are taken when
	// fewer are eligible; the caller decides whether ranks may share.
	Count int
	// CUDAVisibleDevices is CUDA_VISIBLE_DEVICES as the process sees it,
	// CUDAVisibleSet whether it is set at all: set and empty hides every GPU.
	CUDAVisibleDevices string
	CUDAVisibleSet     bool
	// CUDADeviceOrder is CUDA_DEVICE_ORDER as the process sees it. It only
	// decides a warning: indices in CUDA_VISIBLE_DEVICES are read in PCI bus
	// order, which other CUDA programs share only under PCI_BUS_ID.
	CUDADeviceOrder string
}

// Selection is the device and precision a run resolved to.
type Selection struct {
	// GPUs are the chosen GPUs or MIG instances in request order; empty for
	// the CPU. In a child started with Env they are CUDA devices 0..n-1.
	GPUs []GPU `json:"gpus"`
	// CPU is true when no GPU was chosen.
	CPU bool `json:"cpu"`
	// Compute is where the arithmetic runs: "cpu", or, with
	// Request.GPUEngine and a GPU selected, "gpu" until the caller knows
	// which engine took it (the trainer writes "vulkan" or "cpu").
	Compute string `json:"compute"`
	// Pinned is whether the recipe pinned the GPUs (not auto).
	Pinned bool `json:"pinned"`
	// Precision is the resolved format.
	Precision amp.Format `json:"precision"`
	// LossScaling says whether the run scales its loss at Precision.
	LossScaling bool `json:"loss_scaling"`
	// Reason says in one line why this device.
	Reason string `json:"reason"`
	// Warnings are things a user must read: compute on the CPU, slow fp16, a
	// precision fallback, CUDA_VISIBLE_DEVICES entries CUDA ignores.
	Warnings []string `json:"warnings"`
	// Env is the environment for a child process that will use CUDA:
	// CUDA_DEVICE_ORDER=PCI_BUS_ID and CUDA_VISIBLE_DEVICES with the chosen
	// UUIDs, or empty for the CPU so that the child cannot wander onto a GPU.
	Env []string `json:"env"`
}

// CPUCompute is Selection.Compute when the CPU computes.
const CPUCompute = "cpu"

// Select resolves a request against an inventory. It fails on a request it
// cannot honour: a malformed or pinned device that does not exist, is hidden
// by CUDA_VISIBLE_DEVICES, is a MIG-enabled GPU as a whole or lacks the free
// memory; a precision the chosen GPUs lack without PrecisionFallback; a
// pinned GPU without AllowCPUFallback. auto never fails for want of a GPU:
// it takes the CPU and says why in Reason.
func Select(inv Inventory, req Request) (Selection, error) {
	prec := req.Precision
	policy, err := ParsePolicy(string(req.Policy))
	if err != nil {
		return Selection{}, err
	}
	specs, err := requestSpecs(req)
	if err != nil {
		return Selection{}, err
	}

	v := newView(inv, req)
	sel := Selection{Compute: CPUCompute, Warnings: v.warnings}
	pinned := false
	switch k := specs[0].kind; {
	case k == specCPU:
		sel.Reason = "device: cpu"
	case k == specAuto:
		sel.GPUs, sel.Reason = v.auto(policy, req)
	default:
		pinned = true
		if sel.GPUs, sel.Reason, err = v.pin(specs, req); err != nil {
			return Selection{}, err
		}
	}

	p, warns, err := resolvePrecision(sel.GPUs, prec, req.PrecisionFallback, v.all)
	if err != nil {
		return Selection{}, err
	}
	sel.Precision, sel.LossScaling = p, req.LossScaling.For(p)
	sel.Warnings = append(sel.Warnings, warns...)

	sel.CPU = len(sel.GPUs) == 0
	sel.Pinned = pinned
	if !sel.CPU && req.GPUEngine {
		sel.Compute = "gpu"
	} else if !sel.CPU {
		if pinned && !req.AllowCPUFallback {
			return Selection{}, fmt.Errorf("%s resolves to %s, but compute.device: cpu computes on the CPU; "+
				"set allow_cpu_fallback: true to run on the CPU anyway, or device: cpu", quoteSpecs(specs), labels(sel.GPUs))
		}
		sel.Warnings = append([]string{"compute runs on the CPU (compute.device: cpu): the selected GPU does no work; it is only named to child processes in Env"}, sel.Warnings...)
	}
	sel.Env = childEnv(sel.GPUs)
	return sel, nil
}

// childEnv pins a child by UUID, which no device order can renumber; the
// order variable is set as well so that any index the child prints means
// what nvidia-smi means.
func childEnv(gpus []GPU) []string {
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
	}
	return []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")}
}

type specKind int

const (
	specAuto specKind = iota
	specCPU
	specIndex // cuda:N
	specUUID  // GPU-…
	specMIG   // MIG-…
	specPCI
)

// Spec is one device as a recipe names it: auto, cpu, cuda:N (the
// nvidia-smi index), GPU-<uuid or unique prefix>, MIG-<uuid> or a PCI bus
// id. Its zero value is auto. It is parsed once, when a recipe is read.
type Spec struct {
	raw   string
	kind  specKind
	index int     // specIndex
	pci   pciAddr // specPCI
}

// requestSpecs lists the devices a request names: Device, or Devices,
// which name GPUs only.
func requestSpecs(req Request) ([]Spec, error) {
	if len(req.Devices) == 0 {
		d := req.Device
		if d.kind == specAuto {
			d.raw = "auto"
		}
		return []Spec{d}, nil
	}
	if req.Device.kind != specAuto {
		return nil, fmt.Errorf("device %q and devices %q are both set: use one", req.Device.raw, rawSpecs(req.Devices))
	}
	for i, s := range req.Devices {
		if s.kind == specAuto || s.kind == specCPU {
			return nil, fmt.Errorf("devices[%d] is %q: devices lists GPUs only; use device: %s instead", i, s.raw, s.raw)
		}
	}
	return req.Devices, nil
}

func rawSpecs(specs []Spec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.raw
	}
	return out
}

// UnmarshalText reads a device as ParseSpec does.
func (s *Spec) UnmarshalText(b []byte) error {
	sp, err := ParseSpec(string(b))
	if err != nil {
		return err
	}
	*s = sp
	return nil
}

// MarshalText writes the device as it was given ("auto" for the zero Spec).
func (s Spec) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// String is the device as it was given.
func (s Spec) String() string {
	if s.kind == specAuto {
		return "auto"
	}
	return s.raw
}

// MustSpec is ParseSpec for devices written in code; it panics on a
// malformed one.
func MustSpec(s string) Spec {
	sp, err := ParseSpec(s)
	if err != nil {
		panic(err)
	}
	return sp
}

// ParseSpec reads a device as a recipe writes it.
func ParseSpec(s string) (Spec, error) {
	raw := strings.TrimSpace(s)
	low := strings.ToLower(raw)
	sp := Spec{raw: raw}
	switch {
	case low == "" || low == "auto":
		sp.raw, sp.kind = "auto", specAuto
	case low == "cpu":
		sp.kind = specCPU
	case strings.HasPrefix(low, "cuda:"):
		n, err := strconv.Atoi(low[len("cuda:"):])
		if err != nil || n < 0 || !isDigits(low[len("cuda:"):]) {
			return Spec{}, fmt.Errorf("device %q: want cuda:N with N the GPU's index as nvidia-smi shows it", raw)
		}
		sp.kind, sp.index = specIndex, n
	case strings.HasPrefix(low, "gpu-") && len(low) > len("gpu-"):
		sp.kind = specUUID
	case strings.HasPrefix(low, "mig-") && len(low) > len("mig-"):
		sp.kind = specMIG
	default:
		if a, ok := parsePCI(raw); ok {
			sp.kind, sp.pci = specPCI, a
			break
		}
		if isDigits(low) {
			return Spec{}, fmt.Errorf("device %q: write cuda:%s for the GPU that nvidia-smi shows as %s", raw, raw, raw)
		}
		return Spec{}, fmt.Errorf("device %q: want auto, cpu, cuda:N (nvidia-smi index), GPU-<uuid or unique prefix>, MIG-<uuid> or a PCI bus id such as 0000:01:00.0", raw)
	}
	return sp, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// pciAddr is a PCI address compared by value, so that NVML's
// "00000000:01:00.0", lspci's "01:00.0" and any letter case agree.
type pciAddr struct{ domain, bus, dev, fn uint64 }

func parsePCI(s string) (pciAddr, bool) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	var a pciAddr
	if len(parts) == 3 {
		d, err := strconv.ParseUint(parts[0], 16, 32)
		if err != nil || len(parts[0]) > 8 {
			return pciAddr{}, false
		}
		a.domain, parts = d, parts[1:]
	}
	if len(parts) != 2 {
		return pciAddr{}, false
	}
	devfn := strings.Split(parts[1], ".")
	if len(devfn) != 2 || len(parts[0]) > 2 || len(devfn[0]) > 2 || len(devfn[1]) != 1 {
		return pciAddr{}, false
	}
	var err1, err2, err3 error
	a.bus, err1 = strconv.ParseUint(parts[0], 16, 8)
	a.dev, err2 = strconv.ParseUint(devfn[0], 16, 8)
	a.fn, err3 = strconv.ParseUint(devfn[1], 16, 8)
	if err1 != nil || err2 != nil || err3 != nil || a.dev > 0x1f || a.fn > 7 {
		return pciAddr{}, false
	}
	return a, true
}

// view is an inventory seen through CUDA_VISIBLE_DEVICES.
type view struct {
	inv      Inventory
	all      []GPU // whole GPUs in index order
	migs     []GPU // every MIG instance NVML listed
	cvd      string
	cvdSet   bool
	visible  []GPU // what CUDA would enumerate, in its order
	warnings []string
}

func newView(inv Inventory, req Request) *view {
	v := &view{inv: inv, all: append([]GPU(nil), inv.GPUs...), cvd: req.CUDAVisibleDevices, cvdSet: req.CUDAVisibleSet}
	sortByIndex(v.all)
	for _, g := range v.all {
		v.migs = append(v.migs, g.MIGDevices...)
	}
	if !v.cvdSet {
		v.visible = v.all
		return v
	}
	var numeric bool
	v.visible, numeric, v.warnings = applyCUDAVisible(v.all, v.migs, v.cvd)
	if numeric && !strings.EqualFold(strings.TrimSpace(req.CUDADeviceOrder), "PCI_BUS_ID") {
		v.warnings = append(v.warnings, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q uses indices, read here in nvidia-smi (PCI bus) order; "+
			"CUDA_DEVICE_ORDER is not PCI_BUS_ID, so other CUDA programs started from this environment count fastest-first and may mean other GPUs: list UUIDs instead", v.cvd))
	}
	return v
}

func sortByIndex(gpus []GPU) {
	for i := 1; i < len(gpus); i++ { // insertion sort: a handful of GPUs, stable
		for j := i; j > 0 && gpus[j].Index < gpus[j-1].Index; j-- {
			gpus[j], gpus[j-1] = gpus[j-1], gpus[j]
		}
	}
}

// applyCUDAVisible applies CUDA_VISIBLE_DEVICES by CUDA's rules: entries
// are indices (in PCI bus order, as children run under
// CUDA_DEVICE_ORDER=PCI_BUS_ID), GPU-… UUIDs or unique prefixes, or MIG-…
// ids; the visible devices are renumbered in list order; the first entry
// that is unknown, ambiguous, out of range or a repeat hides itself and
// every entry after it; an empty value hides every GPU.
func applyCUDAVisible(all, migs []GPU, value string) (visible []GPU, numeric bool, warnings []string) {
	if strings.TrimSpace(value) == "" {
		return nil, false, nil
	}
	seen := map[string]bool{}
	for i, e := range strings.Split(value, ",") {
		e = strings.TrimSpace(e)
		g, why := cudaVisibleEntry(all, migs, e)
		if why == "" && seen[strings.ToLower(g.UUID)] {
			why = "repeats an earlier entry (" + g.label() + ")"
		}
		if why != "" {
			warnings = append(warnings, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q: entry %d %q %s, so CUDA ignores it and every entry after it", value, i+1, e, why))
			break
		}
		numeric = numeric || isDigits(e)
		seen[strings.ToLower(g.UUID)] = true
		visible = append(visible, g)
	}
	return visible, numeric, warnings
}

func cudaVisibleEntry(all, migs []GPU, e string) (GPU, string) {
	switch {
	case isDigits(e):
		n, err := strconv.Atoi(e)
		if err == nil {
			for _, g := range all {
				if g.Index == n {
					return g, ""
				}
			}
		}
		return GPU{}, fmt.Sprintf("is out of range (%d GPUs)", len(all))
	case hasPrefixFold(e, "GPU-") && len(e) > len("GPU-"), hasPrefixFold(e, "MIG-") && len(e) > len("MIG-"):
		pool := all
		if hasPrefixFold(e, "MIG-") {
			pool = migs
		}
		m := matchUUID(pool, e)
		switch len(m) {
		case 0:
			return GPU{}, "matches no device"
		case 1:
			return m[0], ""
		}
		return GPU{}, fmt.Sprintf("is ambiguous (a prefix of %s)", labels(m))
	}
	return GPU{}, "is not an index, GPU-… UUID or MIG-… id"
}

// matchUUID returns the devices whose UUID starts with prefix, ignoring
// case; an exact match wins over longer UUIDs that share it.
func matchUUID(pool []GPU, prefix string) []GPU {
	var m []GPU
	for _, g := range pool {
		if strings.EqualFold(g.UUID, prefix) {
			return []GPU{g}
		}
		if hasPrefixFold(g.UUID, prefix) {
			m = append(m, g)
		}
	}
	return m
}

func (v *view) isVisible(g GPU) bool {
	if !v.cvdSet {
		return true
	}
	for _, w := range v.visible {
		if strings.EqualFold(w.UUID, g.UUID) {
			return true
		}
	}
	return false
}

// auto picks the best visible GPU by policy among those that pass the memory
// checks. MIG-enabled GPUs are passed over: CUDA cannot use them whole, and
// which instance to take is the user's call. With none left it returns the
// CPU and says why.
func (v *view) auto(policy Policy, req Request) ([]GPU, string) {
	var ok []GPU
	var excluded []string
	for _, g := range v.visible {
		if g.MIGMode == "enabled" && !g.IsMIG() {
			excluded = append(excluded, g.label()+" has MIG enabled (pin one of its MIG-… instances)")
			continue
		}
		if why := memoryShortfall(g, req); why != "" {
			excluded = append(excluded, why)
			continue
		}
		ok = append(ok, g)
	}
	if len(ok) == 0 {
		switch {
		case len(v.all) == 0 && v.inv.Note != "":
			return nil, "auto: " + v.inv.Note
		case len(v.all) == 0:
			return nil, "auto: no GPU found, using CPU"
		case len(v.visible) == 0:
			return nil, fmt.Sprintf("auto: CUDA_VISIBLE_DEVICES=%q hides all %d GPUs, using CPU", v.cvd, len(v.all))
		}
		return nil, "auto: no eligible GPU, using CPU: " + strings.Join(excluded, "; ")
	}
	ranked := Rank(ok, policy)
	best := ranked[0]
	take := ranked[:min(max(req.Count, 1), len(ranked))]
	key, amount := "total", best.MemoryTotal
	if policy == PolicyFree {
		key, amount = "free", best.MemoryFree
	}
	reason := fmt.Sprintf("auto: most %s VRAM (%s) of %d eligible %s: %s", key, formatBytes(amount), len(ok), plural(len(ok), "GPU", "GPUs"), best.label())
	if len(ranked) > 1 {
		second := ranked[1]
		first, tie := func(g GPU) uint64 { return g.MemoryTotal }, func(g GPU) uint64 { return g.MemoryFree }
		tieName := "free VRAM"
		if policy == PolicyFree {
			first, tie, tieName = tie, first, "total VRAM"
		}
		switch {
		case first(best) != first(second):
		case tie(best) != tie(second):
			reason += fmt.Sprintf(" (tie broken by %s: %s)", tieName, formatBytes(tie(best)))
		default:
			reason += " (tie broken by lower index)"
		}
	}
	if len(excluded) > 0 {
		reason += "; passed over: " + strings.Join(excluded, "; ")
	}
	if v.cvdSet {
		reason += fmt.Sprintf("; CUDA_VISIBLE_DEVICES=%q leaves %d of %d GPUs visible", v.cvd, len(v.visible), len(v.all))
	}
	if len(take) > 1 {
		reason += fmt.Sprintf("; %d GPUs for %d ranks, in this order: %s", len(take), max(req.Count, 1), labels(take))
	}
	return take, reason
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// memoryShortfall says why g lacks the free memory req asks for, or "".
func memoryShortfall(g GPU, req Request) string {
	need, what := req.MinFreeMemory, "min_free_memory"
	if req.NeedMemory > need {
		need, what = req.NeedMemory, "the run's estimated need"
	}
	switch {
	case need == 0:
		return ""
	case g.MemoryTotal == 0:
		return fmt.Sprintf("%s: free memory unknown, needs at least %s (%s)", g.label(), formatBytes(need), what)
	case g.MemoryFree < need:
		return fmt.Sprintf("%s has %s free, needs at least %s (%s)", g.label(), formatBytes(g.MemoryFree), formatBytes(need), what)
	}
	return ""
}

// pin resolves pinned devices and checks each of them.
func (v *view) pin(specs []Spec, req Request) ([]GPU, string, error) {
	var out []GPU
	var how []string
	for _, s := range specs {
		g, err := v.resolve(s)
		if err != nil {
			return nil, "", err
		}
		for _, o := range out {
			if strings.EqualFold(o.UUID, g.UUID) {
				return nil, "", fmt.Errorf("devices lists %s twice", g.label())
			}
		}
		if g.MIGMode == "enabled" && !g.IsMIG() {
			return nil, "", v.migError(s, g)
		}
		if why := memoryShortfall(g, req); why != "" {
			return nil, "", fmt.Errorf("device %q refused: %s", s.raw, why)
		}
		out = append(out, g)
		how = append(how, describePin(s)+": "+g.label())
	}
	if len(out) > 1 {
		for _, g := range out {
			if g.IsMIG() {
				return nil, "", fmt.Errorf("devices lists %s with other devices: a CUDA process can use only one MIG instance", g.label())
			}
		}
	}
	reason := "pinned " + strings.Join(how, "; ")
	if v.cvdSet {
		reason += fmt.Sprintf("; CUDA_VISIBLE_DEVICES=%q only limits the choice, indices stay nvidia-smi's", v.cvd)
	}
	return out, reason, nil
}

func describePin(s Spec) string {
	switch s.kind {
	case specIndex:
		return fmt.Sprintf("%s (nvidia-smi index %d)", s.raw, s.index)
	case specUUID:
		return "by UUID " + s.raw
	case specMIG:
		return "by MIG id " + s.raw
	case specPCI:
		return "by PCI bus id " + s.raw
	}
	return s.raw
}

// resolve finds the device a pin names among all devices, then checks that
// CUDA_VISIBLE_DEVICES lets it through, so that a hidden device gets a
// better message than "not found".
func (v *view) resolve(s Spec) (GPU, error) {
	var g GPU
	switch s.kind {
	case specIndex:
		found := false
		for _, c := range v.all {
			if c.Index == s.index {
				g, found = c, true
			}
		}
		if !found {
			return GPU{}, v.notFound(s, fmt.Sprintf("nvidia-smi index %d", s.index))
		}
	case specUUID, specMIG:
		pool, what := v.all, "a UUID starting with "+s.raw
		if s.kind == specMIG {
			pool, what = v.migs, "a MIG instance with a UUID starting with "+s.raw
			if v.inv.Source == "nvidia-smi" {
				what += " (the nvidia-smi fallback does not list MIG instances)"
			}
		}
		m := matchUUID(pool, s.raw)
		switch len(m) {
		case 0:
			return GPU{}, v.notFound(s, what)
		case 1:
			g = m[0]
		default:
			return GPU{}, fmt.Errorf("device %q is ambiguous: it begins %d UUIDs; give more of it:%s", s.raw, len(m), listGPUs(m))
		}
	case specPCI:
		found := false
		for _, c := range v.all {
			if a, ok := parsePCI(c.PCIBusID); ok && a == s.pci {
				g, found = c, true
			}
		}
		if !found {
			return GPU{}, v.notFound(s, "PCI bus id "+s.raw)
		}
	}
	if !v.isVisible(g) {
		visible := "none"
		if len(v.visible) > 0 {
			visible = labels(v.visible)
		}
		return GPU{}, fmt.Errorf("device %q is %s, but CUDA_VISIBLE_DEVICES=%q hides it (visible: %s); cuda:N always counts in nvidia-smi order, not in CUDA_VISIBLE_DEVICES order",
			s.raw, g.label(), v.cvd, visible)
	}
	return g, nil
}

func (v *view) notFound(s Spec, what string) error {
	if len(v.all) == 0 {
		note := v.inv.Note
		if note == "" {
			note = "no GPU found"
		}
		return fmt.Errorf("device %q not found: this host has no GPU (%s)", s.raw, note)
	}
	return fmt.Errorf("device %q not found: no GPU has %s; the GPUs here, in nvidia-smi order:%s", s.raw, what, listGPUs(v.all))
}

func (v *view) migError(s Spec, g GPU) error {
	if len(g.MIGDevices) == 0 {
		return fmt.Errorf("device %q is %s, which has MIG enabled: CUDA cannot use it as a whole GPU; pin one of its MIG instances (MIG-…, listed by nvidia-smi -L) or disable MIG", s.raw, g.label())
	}
	return fmt.Errorf("device %q is %s, which has MIG enabled: CUDA cannot use it as a whole GPU; pin one of its MIG instances:%s", s.raw, g.label(), listGPUs(g.MIGDevices))
}

// listGPUs lists devices one per line, with what a user needs to pin one.
func listGPUs(gpus []GPU) string {
	var b strings.Builder
	for _, g := range gpus {
		fmt.Fprintf(&b, "\n  %s", listLine(g))
		for _, m := range g.MIGDevices {
			fmt.Fprintf(&b, "\n    %s", listLine(m))
		}
	}
	return b.String()
}

func listLine(g GPU) string {
	if g.IsMIG() {
		return fmt.Sprintf("%s  %s  %s total, %s free", g.UUID, g.Name, formatBytes(g.MemoryTotal), formatBytes(g.MemoryFree))
	}
	return fmt.Sprintf("%d  %s  %s  %s  %s total, %s free", g.Index, g.Name, g.UUID, g.PCIBusID, formatBytes(g.MemoryTotal), formatBytes(g.MemoryFree))
}

func labels(gpus []GPU) string {
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = g.label()
	}
	return strings.Join(s, ", ")
}

func quoteSpecs(specs []Spec) string {
	if len(specs) == 1 {
		return fmt.Sprintf("device %q", specs[0].raw)
	}
	q := make([]string, len(specs))
	for i, s := range specs {
		q[i] = strconv.Quote(s.raw)
	}
	return "devices [" + strings.Join(q, ", ") + "]"
}

// resolvePrecision checks want against every chosen GPU. bf16 needs compute
// capability 8.0; fp16 mixed precision has tensor cores from 7.0. The CPU
// emulates all three.
func resolvePrecision(gpus []GPU, want amp.Format, fallback bool, all []GPU) (amp.Format, []string, error) {
	var warns []string
	if want == amp.BF16 {
		var lacking []GPU
		for _, g := range gpus {
			switch {
			case !g.HasComputeCapability():
				warns = append(warns, g.label()+": compute capability unknown (the driver does not report it), so bf16 support (8.0 or newer) is not checked")
			case !g.atLeast(8, 0):
				lacking = append(lacking, g)
			}
		}
		if len(lacking) > 0 {
			have := make([]string, len(lacking))
			for i, g := range lacking {
				have[i] = g.label() + " has " + g.computeCapability()
			}
			if !fallback {
				return 0, nil, errors.New("precision bf16 needs compute capability 8.0 or newer (Ampere), but " + strings.Join(have, ", ") +
					"; set precision: fp16 (with loss scaling) or fp32, or precision_fallback: true to fall back to fp16" + bf16Elsewhere(all))
			}
			warns = append(warns, "bf16 needs compute capability 8.0 or newer, but "+strings.Join(have, ", ")+": using fp16 with loss scaling instead (precision_fallback)")
			want = amp.FP16
		}
	}
	if want == amp.FP16 {
		for _, g := range gpus {
			switch {
			case !g.HasComputeCapability():
				warns = append(warns, g.label()+": compute capability unknown (the driver does not report it), so fp16 tensor-core support (7.0 or newer) is not checked")
			case g.ComputeMajor == 6 && g.ComputeMinor == 1:
				warns = append(warns, g.label()+" has compute capability 6.1: no tensor cores, and fp16 arithmetic runs at 1/64 of the fp32 rate; fp32 will be faster there")
			case !g.atLeast(7, 0):
				warns = append(warns, g.label()+" has compute capability "+g.computeCapability()+": no tensor cores (7.0 or newer), so fp16 mixed precision gains little there")
			}
		}
	}
	return want, warns, nil
}

// bf16Elsewhere names the GPUs on the host that do have bf16, if any.
func bf16Elsewhere(all []GPU) string {
	var have []string
	for _, g := range all {
		if g.atLeast(8, 0) && g.MIGMode != "enabled" {
			have = append(have, g.label())
		}
	}
	if len(have) == 0 {
		return ""
	}
	return ", or pin a GPU that has bf16: " + strings.Join(have, ", ")
}
