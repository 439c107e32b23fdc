package device

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// recordedNVML is an NVML-shaped fixture: what each NVML getter returned on
// a host, or the NVML return code it failed with ("errors", keyed by
// getter). A value that is absent without an error reads as
// ERROR_NOT_SUPPORTED, and the error "PANIC" makes the getter panic the way
// a go-nvml mock with a nil method does.
type recordedNVML struct {
	Host    string           `json:"host"`
	Init    string           `json:"init"`
	Count   string           `json:"count"`
	Devices []recordedDevice `json:"devices"`
}

type recordedDevice struct {
	UUID              string            `json:"uuid"`
	Name              string            `json:"name"`
	PCIBusID          string            `json:"pci_bus_id"`
	Memory            *recordedMemory   `json:"memory"`
	ComputeCapability []int             `json:"cuda_compute_capability"`
	UtilizationGPU    *int              `json:"utilization_gpu"`
	MIGMode           *int              `json:"mig_mode"`
	Errors            map[string]string `json:"errors"`
	MIGDevices        []recordedDevice  `json:"mig_devices"`
}

type recordedMemory struct {
	Total uint64 `json:"total"`
	Free  uint64 `json:"free"`
}

func loadNVML(t *testing.T, name string) recordedNVML {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var r recordedNVML
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeErr turns a recorded NVML return code into the error nvmlError gives
// for it.
func fakeErr(code string) error {
	switch code {
	case "", "SUCCESS":
		return nil
	case "PANIC":
		panic("recorded panic")
	case "ERROR_NOT_SUPPORTED", "ERROR_FUNCTION_NOT_FOUND":
		return fmt.Errorf("%s: %w", code, errNotSupported)
	}
	return errors.New(code)
}

// fakeNVML serves a recordedNVML through nvmlLib.
type fakeNVML struct{ rec recordedNVML }

func (f fakeNVML) Init() error {
	if f.rec.Init == "ERROR_LIBRARY_NOT_FOUND" {
		return errors.New("libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND)")
	}
	return fakeErr(f.rec.Init)
}
func (f fakeNVML) Shutdown() error { return nil }
func (f fakeNVML) DeviceCount() (int, error) {
	return len(f.rec.Devices), fakeErr(f.rec.Count)
}
func (f fakeNVML) Device(i int) (nvmlDevice, error) {
	d := f.rec.Devices[i]
	if err := fakeErr(d.Errors["handle"]); err != nil {
		return nil, err
	}
	return fakeDevice{d}, nil
}

type fakeDevice struct{ d recordedDevice }

func (f fakeDevice) err(getter string, present bool) error {
	if code, ok := f.d.Errors[getter]; ok {
		return fakeErr(code)
	}
	if !present {
		return fakeErr("ERROR_NOT_SUPPORTED")
	}
	return nil
}

func (f fakeDevice) UUID() (string, error)     { return f.d.UUID, f.err("uuid", true) }
func (f fakeDevice) PCIBusID() (string, error) { return f.d.PCIBusID, f.err("pci_bus_id", true) }
func (f fakeDevice) Name() (string, error)     { return f.d.Name, f.err("name", true) }
func (f fakeDevice) Memory() (uint64, uint64, error) {
	if err := f.err("memory", f.d.Memory != nil); err != nil {
		return 0, 0, err
	}
	return f.d.Memory.Total, f.d.Memory.Free, nil
}
func (f fakeDevice) ComputeCapability() (int, int, error) {
	if err := f.err("compute_capability", len(f.d.ComputeCapability) == 2); err != nil {
		return 0, 0, err
	}
	return f.d.ComputeCapability[0], f.d.ComputeCapability[1], nil
}
func (f fakeDevice) Utilization() (int, error) {
	if err := f.err("utilization", f.d.UtilizationGPU != nil); err != nil {
		return 0, err
	}
	return *f.d.UtilizationGPU, nil
}
func (f fakeDevice) MIGEnabled() (bool, error) {
	if err := f.err("mig_mode", f.d.MIGMode != nil); err != nil {
		return false, err
	}
	return *f.d.MIGMode == 1, nil
}
func (f fakeDevice) MIGDevices() ([]nvmlDevice, error) {
	if err := f.err("mig_devices", true); err != nil {
		return nil, err
	}
	var out []nvmlDevice
	for _, m := range f.d.MIGDevices {
		out = append(out, fakeDevice{m})
	}
	return out, nil
}

// fakeSMI answers nvidia-smi calls from fixtures: the first query whose
// field list has no entry in reject gets out, the others fail the way an
// old driver fails them.
type fakeSMI struct {
	out      string
	reject   map[string]string // field → nvidia-smi's complaint
	exitZero bool              // complain with exit status 0
	calls    []string
}

func (f *fakeSMI) run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	for field, complaint := range f.reject {
		if strings.Contains(args[0], ","+field) {
			if f.exitZero {
				return []byte(complaint), nil
			}
			return []byte(complaint), errors.New("exit status 2")
		}
	}
	return []byte(f.out), nil
}

// inventoryFromNVML discovers through a fixture with nvidia-smi missing.
func inventoryFromNVML(t *testing.T, name string) Inventory {
	t.Helper()
	rec := loadNVML(t, name)
	return discover(context.Background(), func() (nvmlLib, error) { return fakeNVML{rec}, nil }, missingSMI)
}

// inventoryFromSMI discovers through an nvidia-smi fixture with NVML missing.
func inventoryFromSMI(t *testing.T, name string) Inventory {
	t.Helper()
	smi := &fakeSMI{out: readTestdata(t, name)}
	return discover(context.Background(), noNVML, smi.run)
}

func noNVML() (nvmlLib, error) {
	return fakeNVML{recordedNVML{Init: "ERROR_LIBRARY_NOT_FOUND"}}, nil
}

func missingSMI(context.Context, string, ...string) ([]byte, error) {
	return nil, fmt.Errorf("exec: \"nvidia-smi\": %w", exec.ErrNotFound)
}
