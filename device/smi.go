package device

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ParseNvidiaSMI reads the output of
//
//	nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,memory.total,memory.free[,compute_cap][,utilization.gpu][,mig.mode.current] --format=csv[,nounits]
//
// with its header line, which is how the parser knows which columns were
// asked for: an old driver has no compute_cap, and the query without it
// leaves the compute capability unknown (0.0). index, uuid, pci.bus_id,
// name, memory.total and memory.free are required; other columns are
// ignored. Values such as "[N/A]" or "[Not Supported]" mean unknown.
//
// It returns the GPUs of every row it could read, in the order of the
// output, and an error describing what it could not read; both can be set.
func ParseNvidiaSMI(text string) ([]GPU, error) {
	r := csv.NewReader(strings.NewReader(text))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1 // checked here, to name the row
	header, err := r.Read()
	if err == io.EOF {
		return nil, errors.New("nvidia-smi output is empty")
	}
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		name := strings.TrimSpace(h)
		if j := strings.IndexByte(name, '['); j >= 0 { // "memory.total [MiB]"
			name = strings.TrimSpace(name[:j])
		}
		col[strings.ToLower(name)] = i
	}
	for _, need := range []string{"index", "uuid", "pci.bus_id", "name", "memory.total", "memory.free"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("nvidia-smi header %q has no %s column (the header line is required: use --format=csv,nounits, not noheader)",
				strings.Join(header, ","), need)
		}
	}

	var gpus []GPU
	var errs []error
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("nvidia-smi line %d: %w", line, err))
			continue
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		if len(rec) != len(header) {
			errs = append(errs, fmt.Errorf("nvidia-smi line %d has %d of the header's %d fields: %q",
				line, len(rec), len(header), strings.Join(rec, ",")))
			continue
		}
		g, err := parseSMIRow(rec, col)
		if err != nil {
			errs = append(errs, fmt.Errorf("nvidia-smi line %d: %w", line, err))
			continue
		}
		gpus = append(gpus, g)
	}
	return gpus, errors.Join(errs...)
}

func parseSMIRow(rec []string, col map[string]int) (GPU, error) {
	get := func(name string) (string, bool) {
		i, ok := col[name]
		if !ok {
			return "", false
		}
		v := strings.TrimSpace(rec[i])
		if unknownSMI(v) {
			return "", false
		}
		return v, true
	}
	g := GPU{UtilizationGPU: -1}
	v, ok := get("index")
	if !ok {
		return GPU{}, fmt.Errorf("index is %q", rec[col["index"]])
	}
	idx, err := strconv.Atoi(v)
	if err != nil || idx < 0 {
		return GPU{}, fmt.Errorf("index %q is not a GPU index", v)
	}
	g.Index = idx
	if g.UUID, ok = get("uuid"); !ok {
		return GPU{}, fmt.Errorf("GPU %d: uuid is %q", idx, rec[col["uuid"]])
	}
	g.PCIBusID, _ = get("pci.bus_id")
	g.Name, _ = get("name")
	for _, m := range []struct {
		col string
		dst *uint64
	}{{"memory.total", &g.MemoryTotal}, {"memory.free", &g.MemoryFree}} {
		if v, ok := get(m.col); ok {
			mib, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(v, "MiB")), 10, 64)
			if err != nil {
				return GPU{}, fmt.Errorf("GPU %d: %s %q is not a MiB count", idx, m.col, v)
			}
			*m.dst = mib << 20
		}
	}
	if v, ok := get("compute_cap"); ok {
		maj, mnr, found := strings.Cut(v, ".")
		a, err1 := strconv.Atoi(maj)
		b, err2 := strconv.Atoi(mnr)
		if !found || err1 != nil || err2 != nil || a <= 0 || b < 0 {
			return GPU{}, fmt.Errorf("GPU %d: compute_cap %q is not major.minor", idx, v)
		}
		g.ComputeMajor, g.ComputeMinor = a, b
	}
	if v, ok := get("utilization.gpu"); ok {
		u, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(v, "%")))
		if err != nil || u < 0 || u > 100 {
			return GPU{}, fmt.Errorf("GPU %d: utilization.gpu %q is not a percentage", idx, v)
		}
		g.UtilizationGPU = u
	}
	if v, ok := get("mig.mode.current"); ok {
		switch strings.ToLower(v) {
		case "enabled":
			g.MIGMode = "enabled"
		case "disabled":
			g.MIGMode = "disabled"
		}
	}
	return g, nil
}

// unknownSMI reports whether an nvidia-smi value stands for "no value":
// "[N/A]", "[Not Supported]", "[Unknown Error]", "[GPU is lost]", …
func unknownSMI(v string) bool {
	return v == "" || strings.HasPrefix(v, "[") || strings.EqualFold(v, "N/A")
}
