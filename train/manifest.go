package train

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/cpufeat"
)

// Manifest is run.json: what ran, where, and on which inputs, so a
// published number can be traced to its exact setup.
type Manifest struct {
	Mixtune     string            `json:"mixtune"`
	GitRevision string            `json:"git_revision"`
	GoVersion   string            `json:"go_version"`
	Modules     map[string]string `json:"modules"`
	Created     string            `json:"created"`
	Seed        uint64            `json:"seed"`
	ConfigHash  string            `json:"config_hash"`
	Host        Host              `json:"host"`
	BLAS        string            `json:"blas"`
	BLASKind    blas.Kind         `json:"blas_kind"`             // the backend's kind, which a resume with auto keeps
	BLASReason  string            `json:"blas_reason,omitempty"` // why auto picked it
	Threads     int               `json:"threads"`
	Device      device.Selection  `json:"device"`
	// Engine is what computed the graphs: "cpu", or "vulkan: " and the
	// device, its driver and GEMM variant; EngineReason why.
	Engine       string `json:"engine"`
	EngineReason string `json:"engine_reason"`
	// GemmTile is the tensor-core tile of the Vulkan engine's 16-bit
	// products, which a resume with compute.gemm_tile: auto keeps, and
	// GemmTileReason why it was taken.
	GemmTile       string `json:"gemm_tile,omitempty"`
	GemmTileReason string `json:"gemm_tile_reason,omitempty"`
	// SplitDKVReason says how attention's dK/dV kernel ran where
	// compute.split_dkv: auto timed it (the same bits either way).
	SplitDKVReason string `json:"split_dkv_reason,omitempty"`
	Discovery      string `json:"device_discovery"`
	Precision      string `json:"precision"`
	LossScaling    bool   `json:"loss_scaling"`
	// Where the bf16 products ran (emulate or hardware) and why; empty
	// in a run without bf16 products.
	BF16Matmul       string            `json:"bf16_matmul,omitempty"`
	BF16MatmulReason string            `json:"bf16_matmul_reason,omitempty"`
	Policy           PolicyRecord      `json:"precision_policy"`
	Inputs           map[string]string `json:"sha256"` // datasets and base model files
	// The processes that trained: "none" and 1 for one process, else the
	// launcher, the MPI library, and each rank's host.
	Launcher  string     `json:"launcher"`
	WorldSize int        `json:"world_size"`
	Reduction string     `json:"reduction,omitempty"`
	MPI       string     `json:"mpi,omitempty"`
	Ranks     []RankInfo `json:"ranks"`
}

// Host is the machine the run used.
type Host struct {
	Name        string   `json:"name"`
	OS          string   `json:"os"`
	Arch        string   `json:"arch"`
	CPUs        int      `json:"cpus"`
	CPUFeatures []string `json:"cpu_features"`
}

// PolicyRecord is the precision policy's lists.
type PolicyRecord struct {
	LowPrecision []string `json:"low_precision"`
	FP32         []string `json:"fp32"`
	Promote      []string `json:"promote"`
}

func newManifest(r *Recipe, c *components) Manifest {
	host, _ := os.Hostname()
	inv, sel, p := c.device.Inventory, c.device.Selection, c.policy
	m := Manifest{
		Mixtune: Version, GitRevision: gitRevision(), GoVersion: runtime.Version(), Modules: map[string]string{},
		Created: time.Now().UTC().Format(time.RFC3339), Seed: r.Seed, ConfigHash: r.Hash(),
		Host: Host{Name: host, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), CPUFeatures: cpuFeatures(c.cpu)},
		BLAS: c.eng.BLAS.Name(), BLASKind: backendKind(c.eng.BLAS.Name()), BLASReason: c.blasReason, Threads: c.eng.Workers, Device: sel, Engine: c.engineName(), EngineReason: c.gpuReason, Discovery: strings.TrimSpace(inv.Source + ": " + inv.Note),
		Precision: p.Low.String(), LossScaling: c.scaler != nil, BF16Matmul: c.bf16.path, BF16MatmulReason: c.bf16.reason,
		Policy: PolicyRecord{LowPrecision: p.LowOps, FP32: p.FP32Ops, Promote: p.Promote},
		Inputs: map[string]string{},
	}
	if c.gpu != nil {
		m.GemmTile, m.GemmTileReason, m.SplitDKVReason = c.gpu.tile, c.gpu.tileReason, c.gpu.splitReason
	}
	m.addWorld(c.comm)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			m.Modules[d.Path] = d.Version
		}
	}
	files := []string{r.Data.Train, r.Data.Validation, r.Task.EvalFile}
	if r.Model.Init == InitPretrained {
		if ents, err := os.ReadDir(r.Model.Path); err == nil {
			for _, e := range ents {
				if n := e.Name(); n == "config.json" || strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".index.json") {
					files = append(files, filepath.Join(r.Model.Path, n))
				}
			}
		}
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		if h, err := fileSHA256(f); err == nil {
			m.Inputs[f] = h
		}
	}
	return m
}

func (m Manifest) write(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "run.json"), append(b, '\n'))
}

// gitRevision is the commit mixtune was built from: the build's VCS stamp,
// else the work tree's HEAD (with "+dirty" for local changes), else "unknown".
func gitRevision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev != "" {
			return rev + dirty
		}
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		rev += "+dirty"
	}
	return rev
}

// cpuFeatures lists the vector extensions the kernels and BLAS may use,
// with the bf16 units f says the CPU has (AMX, and whether the OS
// permits it).
func cpuFeatures(f cpufeat.Features) []string {
	var fs []string
	add := func(ok bool, name string) {
		if ok {
			fs = append(fs, name)
		}
	}
	add(cpu.X86.HasAVX, "avx")
	add(cpu.X86.HasAVX2, "avx2")
	add(cpu.X86.HasFMA, "fma")
	add(cpu.X86.HasAVX512F, "avx512f")
	add(cpu.ARM64.HasASIMD, "asimd")
	add(cpu.ARM64.HasSVE, "sve")
	fs = append(fs, f.Names()...)
	sort.Strings(fs)
	return fs
}

// backendKind is the kind of the backend a Name names: every Name starts
// with its kind ("openblas (OpenBLAS 0.3.21 … Haswell …)").
func backendKind(name string) blas.Kind {
	first, _, _ := strings.Cut(name, " ")
	var k blas.Kind
	if k.UnmarshalText([]byte(first)) != nil || k == blas.KindAuto {
		return ""
	}
	return k
}

// startedBackend is the backend kind a run directory's run.json says
// the run started with (blas_kind, or from the name where an older
// run.json has none), and its name; ok is false where it says none.
func startedBackend(dir string) (kind blas.Kind, name string, ok bool) {
	var m struct {
		BLAS     string    `json:"blas"`
		BLASKind blas.Kind `json:"blas_kind"`
	}
	if !readRunJSON(dir, &m) {
		return "", "", false
	}
	k := m.BLASKind
	if k == "" {
		k = backendKind(m.BLAS)
	}
	return k, m.BLAS, k != "" && k != blas.KindAuto
}

// backendThreads is the part of a backend's Name that says how many
// goroutines share a product, which does not change its results.
var backendThreads = regexp.MustCompile(`\d+ goroutines × 1 thread`)

// sameKernels says whether two backend Names compute the same bits:
// the same kernels, whatever the thread count; native's AVX-512 kernel
// gives the bits of its AVX2 one by design (blas.nativeKernel12AVX512).
func sameKernels(a, b string) bool {
	norm := func(s string) string {
		return strings.Replace(backendThreads.ReplaceAllString(s, ""), "native (Go, AVX-512/FMA kernel)", "native (Go, AVX2/FMA kernel)", 1)
	}
	return norm(a) == norm(b)
}

// startedEngine is the engine a run directory's run.json says the run
// started on ("cpu", or "vulkan: " and the device); "" where it says none
// (a run.json older than the field).
func startedEngine(dir string) string {
	var m struct {
		Engine string `json:"engine"`
	}
	readRunJSON(dir, &m)
	return m.Engine
}

// readRunJSON decodes a run directory's run.json into m, leaving m as it
// is where there is none or it does not decode.
func readRunJSON(dir string, m any) bool {
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	return err == nil && json.Unmarshal(b, m) == nil
}
