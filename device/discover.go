package device

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// nvmlLib is the part of NVML that discovery reads. The cgo build wraps
// go-nvml in it; tests feed recorded NVML-shaped data through it.
type nvmlLib interface {
	Init() error
	Shutdown() error
	DeviceCount() (int, error)
	Device(index int) (nvmlDevice, error)
}

// nvmlDevice is one device handle: a whole GPU or a MIG instance. Getters
// that the driver does not support return an error wrapping
// errNotSupported.
type nvmlDevice interface {
	UUID() (string, error)
	PCIBusID() (string, error)
	Name() (string, error)
	Memory() (total, free uint64, err error)
	ComputeCapability() (major, minor int, err error)
	Utilization() (percent int, err error)
	MIGEnabled() (bool, error)
	// MIGDevices lists the MIG instances of a MIG-enabled GPU.
	MIGDevices() ([]nvmlDevice, error)
}

// errNotSupported marks a getter this GPU or driver does not have: the field
// is unknown, which is not worth a note.
var errNotSupported = errors.New("not supported")

// runFunc runs a command and returns its combined output.
type runFunc func(ctx context.Context, name string, args ...string) ([]byte, error)

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// smiTimeout bounds one nvidia-smi call: with a wedged driver it can hang
// for minutes, and discovery must never stop a run.
const smiTimeout = 20 * time.Second

// Discover finds the GPUs of this host through NVML, or through nvidia-smi
// when NVML cannot be loaded or fails. With neither it returns an Inventory
// with no GPUs, Source "none" and a Note saying why; it never fails and
// never panics, so that a run can always go on on the CPU.
func Discover(ctx context.Context) Inventory {
	return discover(ctx, openNVML, runCommand)
}

func discover(ctx context.Context, open func() (nvmlLib, error), run runFunc) Inventory {
	var why []string
	if err := ctx.Err(); err != nil {
		return noGPU("discovery cancelled: " + err.Error())
	}
	gpus, notes, err := readNVML(open)
	if err == nil {
		inv := Inventory{GPUs: gpus, Source: "nvml", Note: strings.Join(notes, "; ")}
		switch {
		case len(gpus) == 0 && len(notes) == 0:
			inv.Note = "no GPU found, using CPU: NVML lists no devices"
		case len(gpus) == 0:
			inv.Note = "no GPU found, using CPU: NVML lists no usable device; " + inv.Note
		}
		return inv
	}
	why = append(why, "NVML: "+err.Error())

	gpus, err = readNvidiaSMI(ctx, run)
	if len(gpus) > 0 || err == nil {
		notes := []string{"NVML unavailable (" + strings.Join(why, "; ") + "), read nvidia-smi instead"}
		if err != nil {
			notes = append(notes, "nvidia-smi: "+err.Error())
		}
		for _, g := range gpus {
			if g.MIGMode == "enabled" {
				notes = append(notes, "nvidia-smi does not list MIG instances: GPUs with MIG enabled cannot be pinned by MIG-… id")
				break
			}
		}
		inv := Inventory{GPUs: gpus, Source: "nvidia-smi", Note: strings.Join(notes, "; ")}
		if len(gpus) == 0 {
			inv.Note = "no GPU found, using CPU: nvidia-smi lists no devices; " + inv.Note
		}
		return inv
	}
	why = append(why, "nvidia-smi: "+err.Error())
	return noGPU(strings.Join(why, "; "))
}

func noGPU(why string) Inventory {
	return Inventory{Source: "none", Note: "no GPU found, using CPU: " + why}
}

// readNVML reads every device. A failure to load, initialise or count is an
// error, so that nvidia-smi gets its chance; a device that cannot be read
// is left out with a note, and so is a field that fails for a reason other
// than not being supported.
func readNVML(open func() (nvmlLib, error)) (gpus []GPU, notes []string, err error) {
	// go-nvml and its mocks panic on some misuse (a nil mock method, a
	// symbol an old driver lacks); none of that may reach the caller.
	defer func() {
		if r := recover(); r != nil {
			gpus, notes, err = nil, nil, fmt.Errorf("panic: %v", r)
		}
	}()
	lib, err := open()
	if err != nil {
		return nil, nil, err
	}
	if err := lib.Init(); err != nil {
		return nil, nil, fmt.Errorf("init: %w", err)
	}
	defer func() {
		if err := safeCall(lib.Shutdown); err != nil {
			notes = append(notes, "NVML shutdown: "+err.Error())
		}
	}()
	var n int
	if err := safeCall(func() (err error) { n, err = lib.DeviceCount(); return err }); err != nil {
		return nil, nil, fmt.Errorf("device count: %w", err)
	}
	for i := 0; i < n; i++ {
		var d nvmlDevice
		if err := safeCall(func() (err error) { d, err = lib.Device(i); return err }); err != nil {
			notes = append(notes, fmt.Sprintf("GPU %d left out: %v", i, err))
			continue
		}
		g, dnotes, err := readDevice(d, i)
		notes = append(notes, dnotes...)
		if err != nil {
			notes = append(notes, fmt.Sprintf("GPU %d left out: %v", i, err))
			continue
		}
		gpus = append(gpus, g)
	}
	return gpus, notes, nil
}

// readDevice reads one whole GPU and its MIG instances. Without a UUID a GPU
// cannot be pinned or handed to a child, so it is left out.
func readDevice(d nvmlDevice, index int) (GPU, []string, error) {
	g := GPU{Index: index, UtilizationGPU: -1}
	var notes []string
	field := func(what string, f func() error) {
		if err := safeCall(f); err != nil && !errors.Is(err, errNotSupported) {
			notes = append(notes, fmt.Sprintf("GPU %d %s: %v", index, what, err))
		}
	}
	if err := safeCall(func() (err error) { g.UUID, err = d.UUID(); return err }); err != nil {
		return GPU{}, nil, fmt.Errorf("reading its UUID: %w", err)
	}
	if g.UUID == "" {
		return GPU{}, nil, errors.New("empty UUID")
	}
	field("PCI bus id", func() (err error) { g.PCIBusID, err = d.PCIBusID(); return err })
	field("name", func() (err error) { g.Name, err = d.Name(); return err })
	field("memory", func() (err error) { g.MemoryTotal, g.MemoryFree, err = d.Memory(); return err })
	field("compute capability", func() (err error) {
		g.ComputeMajor, g.ComputeMinor, err = d.ComputeCapability()
		if err != nil {
			g.ComputeMajor, g.ComputeMinor = 0, 0
		}
		return err
	})
	field("utilization", func() (err error) {
		u, err := d.Utilization()
		if err == nil {
			g.UtilizationGPU = u
		}
		return err
	})
	var mig bool
	field("MIG mode", func() (err error) {
		mig, err = d.MIGEnabled()
		if err == nil {
			g.MIGMode = "disabled"
			if mig {
				g.MIGMode = "enabled"
			}
		}
		return err
	})
	if mig {
		var ms []nvmlDevice
		field("MIG instances", func() (err error) { ms, err = d.MIGDevices(); return err })
		for j, m := range ms {
			mg := GPU{Index: index, PCIBusID: g.PCIBusID, ComputeMajor: g.ComputeMajor, ComputeMinor: g.ComputeMinor,
				UtilizationGPU: -1, MIGMode: "enabled"}
			if err := safeCall(func() (err error) { mg.UUID, err = m.UUID(); return err }); err != nil || !hasPrefixFold(mg.UUID, "MIG-") {
				notes = append(notes, fmt.Sprintf("GPU %d MIG instance %d left out: no MIG UUID (%q, %v)", index, j, mg.UUID, err))
				continue
			}
			field("MIG instance name", func() (err error) { mg.Name, err = m.Name(); return err })
			field("MIG instance memory", func() (err error) { mg.MemoryTotal, mg.MemoryFree, err = m.Memory(); return err })
			g.MIGDevices = append(g.MIGDevices, mg)
		}
	}
	return g, notes, nil
}

// safeCall runs one NVML call and turns a panic into an error.
func safeCall(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// smiQueries are the nvidia-smi --query-gpu field lists discovery tries, in
// order: nvidia-smi refuses a whole query for one field it does not know,
// and an old driver does not know compute_cap (added around R510), a very
// old one mig.mode.current (R450).
func smiQueries() [][]string {
	return [][]string{
		{"index", "uuid", "pci.bus_id", "name", "memory.total", "memory.free", "compute_cap", "utilization.gpu", "mig.mode.current"},
		{"index", "uuid", "pci.bus_id", "name", "memory.total", "memory.free", "utilization.gpu", "mig.mode.current"},
		{"index", "uuid", "pci.bus_id", "name", "memory.total", "memory.free", "utilization.gpu"},
	}
}

// readNvidiaSMI runs nvidia-smi with the header kept (csv,nounits), so that
// the parser reads from the output itself which columns it got.
func readNvidiaSMI(ctx context.Context, run runFunc) ([]GPU, error) {
	var last error
	for _, q := range smiQueries() {
		cctx, cancel := context.WithTimeout(ctx, smiTimeout)
		out, err := run(cctx, "nvidia-smi", "--query-gpu="+strings.Join(q, ","), "--format=csv,nounits")
		cancel()
		if errors.Is(err, exec.ErrNotFound) {
			return nil, errors.New("not found in PATH")
		}
		// Checked whatever the exit status: the complaint is what matters.
		if strings.Contains(string(out), "is not a valid field to query") {
			last = fmt.Errorf("%s", firstLine(string(out)))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%v: %s", err, firstLine(string(out)))
		}
		gpus, err := ParseNvidiaSMI(string(out))
		sort.SliceStable(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
		return gpus, err
	}
	return nil, last
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "no output"
	}
	return s
}
