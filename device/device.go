// Package device finds the GPUs of a host, ranks them, picks the one a run
// asked for and the precision that card supports.
//
// One index space is used everywhere: nvidia-smi's, which is NVML's and the
// PCI bus order. CUDA's default order (CUDA_DEVICE_ORDER=FASTEST_FIRST) can
// differ from it, which is how a trainer once ran on a GTX 1080 Ti while its
// user meant the TITAN RTX next to it. So a request's cuda:N is always the
// nvidia-smi index, and a child process that will use CUDA is started with
// CUDA_DEVICE_ORDER=PCI_BUS_ID and CUDA_VISIBLE_DEVICES set to the chosen
// UUIDs (see Selection.Env), which no index order can confuse.
//
// Discovery goes through NVML (github.com/NVIDIA/go-nvml, loaded with dlopen
// at run time, which needs cgo) and falls back to nvidia-smi. Without either
// the host has no GPU and the run uses the CPU: discovery never fails a run.
//
// CUDA_VISIBLE_DEVICES, when set, is applied before selection by CUDA's
// rules (indices read in PCI bus order, GPU-… UUIDs or unique prefixes,
// MIG-… ids, the first bad entry hiding the rest, empty hiding all): it
// limits which devices may be chosen and never renumbers cuda:N.
//
// MIG: a MIG-enabled GPU is reported as such and cannot be chosen whole;
// auto passes over it and a pin must name one MIG-… instance, which NVML
// discovery lists (the nvidia-smi fallback does not). One MIG instance per
// run, as CUDA allows.
//
// mixtune has no GPU compute backend yet. A Selection that names a GPU still
// computes on the CPU, says so in its Warnings, and a pinned GPU is refused
// unless the caller allows the CPU fallback.
package device

import (
	"fmt"
	"sort"
	"strings"
)

// GPU is one device as NVML or nvidia-smi reports it.
type GPU struct {
	// Index is the NVML and nvidia-smi index: PCI bus order, which is also
	// CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID.
	Index int `json:"index"`
	// UUID is "GPU-…" for a whole GPU and "MIG-…" for a MIG instance.
	UUID     string `json:"uuid"`
	PCIBusID string `json:"pci_bus_id"`
	Name     string `json:"name"`
	// Memory in bytes. 0 when the source could not read it, so that such a
	// card never passes a memory requirement and ranks last.
	MemoryTotal uint64 `json:"memory_total_bytes"`
	MemoryFree  uint64 `json:"memory_free_bytes"`
	// Compute capability; 0.0 when unknown (nvidia-smi before compute_cap).
	ComputeMajor int `json:"compute_major"`
	ComputeMinor int `json:"compute_minor"`
	// UtilizationGPU is in percent, -1 when unknown or not supported.
	UtilizationGPU int `json:"utilization_gpu_percent"`
	// MIGMode is "enabled", "disabled", or "" when unknown or not supported.
	// A MIG instance carries its parent's "enabled".
	MIGMode string `json:"mig_mode"`
	// MIGDevices are the MIG instances of a MIG-enabled GPU, as NVML lists
	// them; each has its parent's Index, PCIBusID and compute capability.
	// The nvidia-smi fallback does not list them.
	MIGDevices []GPU `json:"mig_devices,omitempty"`
}

// IsMIG reports whether g is a MIG instance rather than a whole GPU.
func (g GPU) IsMIG() bool { return hasPrefixFold(g.UUID, "MIG-") }

// HasComputeCapability reports whether the compute capability is known.
func (g GPU) HasComputeCapability() bool { return g.ComputeMajor > 0 }

// atLeast reports whether the known compute capability is ≥ major.minor.
func (g GPU) atLeast(major, minor int) bool {
	return g.ComputeMajor > major || g.ComputeMajor == major && g.ComputeMinor >= minor
}

func (g GPU) computeCapability() string {
	if !g.HasComputeCapability() {
		return "?"
	}
	return fmt.Sprintf("%d.%d", g.ComputeMajor, g.ComputeMinor)
}

// label names g the way every message does: index, name and UUID, since
// the index alone is what got confused in the first place.
func (g GPU) label() string {
	if g.IsMIG() {
		return fmt.Sprintf("MIG instance %s (%s) on GPU %d", g.UUID, g.Name, g.Index)
	}
	return fmt.Sprintf("GPU %d (%s, %s)", g.Index, g.Name, g.UUID)
}

// Inventory is what discovery found.
type Inventory struct {
	// GPUs in Index order. MIG instances are nested in their parent.
	GPUs []GPU `json:"gpus"`
	// Source is "nvml", "nvidia-smi" or "none".
	Source string `json:"source"`
	// Note says what went wrong or was left out, e.g. "no GPU found, using
	// CPU: …" with the reasons NVML and nvidia-smi gave.
	Note string `json:"note,omitempty"`
}

// Policy orders GPUs for auto selection and for the report.
type Policy string

const (
	// PolicyTotal prefers the most total VRAM, then the most free.
	PolicyTotal Policy = "total"
	// PolicyFree prefers the most free VRAM, then the most total: for
	// shared hosts where the biggest card may be busy.
	PolicyFree Policy = "free"
)

// ParsePolicy reads a policy as a config spells it; "" is PolicyTotal.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(strings.ToLower(strings.TrimSpace(s))) {
	case "", PolicyTotal:
		return PolicyTotal, nil
	case PolicyFree:
		return PolicyFree, nil
	}
	return "", fmt.Errorf("unknown device selection policy %q (want %q or %q)", s, PolicyTotal, PolicyFree)
}

func (p Policy) describe() string {
	if p == PolicyFree {
		return "most free VRAM, then most total"
	}
	return "most total VRAM, then most free"
}

// Rank returns a copy of gpus, best first by policy p; ties go to the lower
// index so that the order is the same on every call. An unknown policy
// ranks as PolicyTotal.
func Rank(gpus []GPU, p Policy) []GPU {
	out := append([]GPU(nil), gpus...)
	sort.SliceStable(out, func(i, j int) bool { return better(out[i], out[j], p) })
	return out
}

// better reports whether a ranks before b under p.
func better(a, b GPU, p Policy) bool {
	first, second := func(g GPU) uint64 { return g.MemoryTotal }, func(g GPU) uint64 { return g.MemoryFree }
	if p == PolicyFree {
		first, second = second, first
	}
	switch {
	case first(a) != first(b):
		return first(a) > first(b)
	case second(a) != second(b):
		return second(a) > second(b)
	}
	return a.Index < b.Index
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// UnmarshalText reads a policy as ParsePolicy does.
func (p *Policy) UnmarshalText(b []byte) error {
	q, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}
