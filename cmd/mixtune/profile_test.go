package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/gpu/vulkan/vulkantest"
	"github.com/mixtune/mixtune/train"
)

// The profile table shows the longest rows, one line for the rest and a
// total, whose times, shares and calls are the rows' sums.
func TestPrintProfile(t *testing.T) {
	for _, tc := range []struct {
		rows, lines int // lines: rows shown, with "more" and total
		more        string
	}{
		{3, 4, ""},
		{profileRows, profileRows + 1, ""},
		{profileRows + 5, profileRows + 2, "(5 more rows)"},
	} {
		t.Run(fmt.Sprint(tc.rows), func(t *testing.T) {
			res := train.BenchResult{MsPerStep: 100, GPUMsPerStep: 90, CommandMsPerStep: 80, SubmitsPerStep: 3}
			for i := range tc.rows {
				// 1, 2, ... ms: the rows sum to n(n+1)/2 ms, n(n+1)/2 calls
				res.Profile = append(res.Profile, train.KernelTime{Kernel: fmt.Sprintf("k%d", i), Kind: "linear", Calls: float64(i + 1), Ms: float64(i + 1), Share: float64(i+1) / 1000})
			}
			var out bytes.Buffer
			printProfile(&out, res, 2)
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			body := lines[3:] // the title, the step's times, the header
			if len(body) != tc.lines {
				t.Fatalf("%d table lines, want %d:\n%s", len(body), tc.lines, out.String())
			}
			if tc.more != "" && !strings.Contains(body[len(body)-2], tc.more) {
				t.Errorf("next to last line %q, want %q", body[len(body)-2], tc.more)
			}
			sum := float64(tc.rows*(tc.rows+1)) / 2
			want := fmt.Sprintf("%10.3f %5.1f%% %7.0f %8s  %-32s", sum, 100*sum/1000, sum, "-", "total")
			if !strings.HasPrefix(body[len(body)-1], want) {
				t.Errorf("total line %q, want it to start %q", body[len(body)-1], want)
			}
			if !strings.Contains(lines[1], "wall 100.00 ms · command buffers on the GPU 90.00 ms in 3 submits (host and sync outside them: 10.00 ms) · commands 80.00 ms (barriers and gaps between them: 10.00 ms)") {
				t.Errorf("times line %q", lines[1])
			}
		})
	}
}

// mixtune bench --cpuprofile FILE writes a Go CPU profile of the timed
// steps: a gzipped pprof protobuf that names mixtune's functions.
func TestBenchCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	code, out, stderr := runIn(t, "bench", "--vocab", "64", "--dim", "64", "--layers", "1", "--heads", "2", "--ffn", "96", "--seq", "64", "--batch", "4",
		"--steps", "60", "--warmup", "0", "--blas", "native", "--cpuprofile", path)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s is not gzipped: %v", path, err)
	}
	body, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	// the profile's string table holds the sampled functions' names: the
	// timed steps (about half a second) run mixtune's kernels
	if !bytes.Contains(body, []byte("github.com/mixtune/mixtune/")) {
		t.Errorf("the profile (%d bytes unzipped) names no function of mixtune", len(body))
	}
}

// mixtune bench --vulkan-device D --profile prints the table after the
// usual result, and with --json adds the profile, which is absent
// without --profile.
func TestBenchProfileCommand(t *testing.T) {
	dev := vulkantest.Find(t).Spec
	args := []string{"bench", "--vulkan-device", dev, "--vocab", "64", "--dim", "32", "--layers", "1", "--heads", "2", "--ffn", "48",
		"--seq", "8", "--batch", "1", "--rank", "2", "--steps", "1", "--warmup", "0", "--blas", "native", "--threads", "1"}
	code, out, stderr := runIn(t, append(args, "--profile")...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"tokens/s", "GPU profile of the 1 timed steps", "attention_fwd", "gemm_f32", "total"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, profile := range []bool{false, true} {
		a := append(args, "--json")
		if profile {
			a = append(a, "--profile")
		}
		code, out, stderr := runIn(t, a...)
		if code != 0 {
			t.Fatalf("--profile %v: exit %d\n%s", profile, code, stderr)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		rows, ok := res["profile"].([]any)
		if ok != profile || (profile && len(rows) == 0) {
			t.Errorf("--profile %v: profile %v", profile, res["profile"])
		}
		if _, ok := res["gpu_ms_per_step"]; ok != profile {
			t.Errorf("--profile %v: gpu_ms_per_step %v", profile, res["gpu_ms_per_step"])
		}
	}
}
