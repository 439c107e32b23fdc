package vulkan

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// TestSPIRVUpToDate recompiles every shader as shaders/build.txt says and
// compares with the committed SPIR-V, so a shader edited without running
// scripts/gen_spirv.sh fails here. It needs the glslc build.txt names:
// another version compiles to other (valid) bytes.
func TestSPIRVUpToDate(t *testing.T) {
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		t.Skip("no glslc (Debian: apt-get install glslc) to recompile the shaders")
	}
	list, err := os.ReadFile("shaders/build.txt")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("no shaders/build.txt here: the test binary runs outside gpu/vulkan's sources")
	}
	must(t, err)
	out, err := exec.Command(glslc, "--version").Output()
	must(t, err)
	have := strings.SplitN(string(out), "\n", 2)[0]
	var builds [][]string // output, source, flags
	sc := bufio.NewScanner(bytes.NewReader(list))
	for sc.Scan() {
		line := sc.Text()
		if want, ok := strings.CutPrefix(line, "# glslc: "); ok && want != have {
			t.Skipf("the SPIR-V was compiled by glslc %q; this is %q", want, have)
		}
		if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(line, "#") {
			builds = append(builds, f)
		}
	}
	if len(builds) == 0 {
		t.Fatal("shaders/build.txt lists no shaders")
	}
	// One glslc per core: the unrolled attention builds take seconds each.
	dir := t.TempDir()
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, f := range builds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			dst := filepath.Join(dir, f[0])
			args := append([]string{"-fshader-stage=compute", "--target-env=vulkan1.1", "-O"}, f[2:]...)
			args = append(args, "-o", dst, filepath.Join("shaders", f[1]))
			if msg, err := exec.Command(glslc, args...).CombinedOutput(); err != nil {
				t.Errorf("glslc %v: %v\n%s", args, err, msg)
				return
			}
			fresh, err := os.ReadFile(dst)
			if err != nil {
				t.Error(err)
				return
			}
			committed, err := spirv(f[0])
			if err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(fresh, committed) {
				t.Errorf("shaders/%s is stale: recompiling %s gives other SPIR-V; run scripts/gen_spirv.sh", f[0], f[1])
			}
			if _, err := spirvWords(committed); err != nil {
				t.Errorf("shaders/%s: %v", f[0], err)
			}
		}()
	}
	wg.Wait()
	n := len(builds)
	t.Logf("%d SPIR-V files match %s", n, have)
}

// TestSPIRVGlslangUpToDate is TestSPIRVUpToDate for the SPIR-V that
// shaders/build_glslang.txt lists: compiled by a glslang built from
// source (scripts/gen_spirv_coopmat.sh), which CI does not have. It runs
// where MIXTUNE_GLSLANG, or glslang on PATH, is the version the file names.
func TestSPIRVGlslangUpToDate(t *testing.T) {
	list, err := os.ReadFile("shaders/build_glslang.txt")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("no shaders/build_glslang.txt here: the test binary runs outside gpu/vulkan's sources")
	}
	must(t, err)
	glslang := os.Getenv("MIXTUNE_GLSLANG")
	if glslang == "" {
		if glslang, err = exec.LookPath("glslang"); err != nil {
			t.Skip("no glslang (MIXTUNE_GLSLANG or on PATH) to recompile the GL_KHR_cooperative_matrix/GL_EXT_bfloat16 shaders; scripts/gen_spirv_coopmat.sh says how to build one")
		}
	}
	out, err := exec.Command(glslang, "--version").Output()
	if err != nil {
		t.Skipf("%s --version: %v", glslang, err)
	}
	have := strings.SplitN(string(out), "\n", 2)[0]
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(list))
	for sc.Scan() {
		line := sc.Text()
		if want, ok := strings.CutPrefix(line, "# glslang: "); ok && want != have {
			t.Skipf("the SPIR-V was compiled by glslang %q; %s is %q", want, glslang, have)
		}
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(line, "#") {
			continue
		}
		dst := filepath.Join(t.TempDir(), f[0])
		args := append([]string{"-V", "--target-env", "vulkan1.2", "-S", "comp"}, f[2:]...)
		args = append(args, "-o", dst, filepath.Join("shaders", f[1]))
		if msg, err := exec.Command(glslang, args...).CombinedOutput(); err != nil {
			t.Fatalf("glslang %v: %v\n%s", args, err, msg)
		}
		fresh, err := os.ReadFile(dst)
		must(t, err)
		committed, err := spirv(f[0])
		must(t, err)
		if !bytes.Equal(fresh, committed) {
			t.Errorf("shaders/%s is stale: recompiling %s gives other SPIR-V; run scripts/gen_spirv_coopmat.sh", f[0], f[1])
		}
		n++
	}
	if n == 0 {
		t.Fatal("shaders/build_glslang.txt lists no shaders")
	}
	t.Logf("%d SPIR-V files match %s", n, have)
}

// TestSPIRVListed: every embedded SPIR-V file is made by a line of
// shaders/build.txt or shaders/build_glslang.txt, and is well formed.
func TestSPIRVListed(t *testing.T) {
	listed := map[string]bool{}
	for _, name := range []string{"shaders/build.txt", "shaders/build_glslang.txt"} {
		list, err := os.ReadFile(name)
		if errors.Is(err, fs.ErrNotExist) {
			t.Skipf("no %s here: the test binary runs outside gpu/vulkan's sources", name)
		}
		must(t, err)
		for _, line := range strings.Split(string(list), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(line, "#") {
				listed[f[0]] = true
			}
		}
	}
	files, err := fs.Glob(shaderFS, "shaders/*.spv")
	must(t, err)
	for _, f := range files {
		name := strings.TrimPrefix(f, "shaders/")
		if !listed[name] {
			t.Errorf("%s is embedded but no build file lists it", name)
		}
		code, err := spirv(name)
		must(t, err)
		if _, err := spirvWords(code); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
