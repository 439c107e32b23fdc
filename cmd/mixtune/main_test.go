package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/train"
)

// The test binary doubles as mixtune: with MIXTUNE_TEST_MAIN=1 it runs the
// command line, so tests can start, signal and kill real processes. With
// MIXTUNE_TEST_CHECKPOINT_PAUSE=d it also pauses for d at each stage of
// every checkpoint write, so that a test can kill it there on purpose.
func TestMain(m *testing.M) {
	if os.Getenv("MIXTUNE_TEST_MAIN") == "1" {
		var a app
		if d, err := time.ParseDuration(os.Getenv("MIXTUNE_TEST_CHECKPOINT_PAUSE")); err == nil {
			a.faults.CheckpointStage = func(string) { time.Sleep(d) }
		}
		os.Exit(a.run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func mixtune(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "MIXTUNE_TEST_MAIN=1")
	return cmd
}

// workdir makes a tiny model, data and a recipe that checkpoints often.
func workdir(t *testing.T, steps int) (dir, recipe string) {
	t.Helper()
	dir = t.TempDir()
	m, err := model.New(model.Config{VocabSize: 259, HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(filepath.Join(dir, "model"), amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	var rows strings.Builder
	rng := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 200; i++ {
		w := fmt.Sprintf("%d%d%d", rng.IntN(10), rng.IntN(10), rng.IntN(10))
		fmt.Fprintf(&rows, "{\"prompt\": \"n=%s?\", \"completion\": \"%s!\"}\n", w, w)
	}
	if err := os.WriteFile(filepath.Join(dir, "train.jsonl"), []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	recipe = filepath.Join(dir, "r.yaml")
	body := fmt.Sprintf(`name: k
seed: 5
output_dir: %[1]s/runs
model: {path: %[1]s/model}
data: {train: %[1]s/train.jsonl, validation_split: 0.1, seq_len: 16}
adapter: {type: lora, r: 4, alpha: 8, target_modules: [q_proj, v_proj, up_proj]}
train: {steps: %[2]d, batch_size: 8, eval_every: 40, log_every: 1, checkpoint_every: 7, keep_checkpoints: 2}
optimizer: {lr: 1.0e-2}
schedule: {warmup_steps: 5}
compute: {blas: gonum, threads: 2}
`, dir, steps)
	if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, recipe
}

// metricsWithoutClock reads metrics.jsonl dropping the wall-clock fields.
func metricsWithoutClock(t *testing.T, runDir string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		delete(m, "tokens_per_s")
		delete(m, "elapsed_s")
		b, _ := json.Marshal(m) // keys sorted: a canonical line
		out = append(out, string(b))
	}
	return out
}

// TestKillAndResumeMatchesUninterrupted SIGKILLs training processes again
// and again, half the time at a random moment and half the time on purpose
// inside a checkpoint write (the process pauses there), resumes each time,
// and requires the metrics and the adapter of an uninterrupted run, bit
// for bit: for fp32 LoRA, and for bf16 DoRA on a bf16 base. The random
// seed is logged; MIXTUNE_KILL_SEED=N replays a failure.
func TestKillAndResumeMatchesUninterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills training processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MIXTUNE_KILL_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("kill schedule seed %d (rerun with MIXTUNE_KILL_SEED=%d)", seed, seed)
	for _, variant := range []struct {
		name string
		sets []string
	}{
		{"fp32 lora", nil},
		{"bf16 dora on a bf16 base", []string{"precision=bf16", "model.base_dtype=bf16", "adapter.type=dora"}},
	} {
		t.Run(variant.name, func(t *testing.T) {
			killAndResume(t, seed, variant.sets)
		})
	}
}

func killAndResume(t *testing.T, seed uint64, sets []string) {
	dir, recipe := workdir(t, 120)
	var setArgs []string
	for _, s := range sets {
		setArgs = append(setArgs, "--set", s)
	}
	full := filepath.Join(dir, "runs", "full")
	if out, err := mixtune(append([]string{"train", "-c", recipe, "--set", "name=full"}, setArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}

	run := filepath.Join(dir, "runs", "k")
	ckRoot := filepath.Join(run, "checkpoints")
	rng := rand.New(rand.NewPCG(seed, 7))
	randomKills, checkpointKills := 0, 0
	for attempt := 0; ; attempt++ {
		args := append([]string{"train", "-c", recipe}, setArgs...)
		if attempt > 0 {
			args = []string{"train", "--resume", run}
		}
		cmd := mixtune(args...)
		inCheckpoint := attempt%2 == 1 // every other leg dies inside a checkpoint write
		if inCheckpoint {
			cmd.Env = append(cmd.Env, "MIXTUNE_TEST_CHECKPOINT_PAUSE=150ms")
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		kill := func() {
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
		var err error
		switch {
		case randomKills+checkpointKills >= 6:
			err = <-done // enough: let it finish
		case attempt == 0:
			// the first leg reaches a checkpoint, then dies at a random moment
			waitFor(t, filepath.Join(ckRoot, "step-000007", "checkpoint.json"), done)
			fallthrough
		case !inCheckpoint:
			select {
			case err = <-done:
			case <-time.After(time.Duration(20+rng.IntN(250)) * time.Millisecond):
				kill()
				randomKills++
				continue
			}
		default:
			if waitForCheckpointWrite(ckRoot, done) {
				kill()
				checkpointKills++
				continue
			}
			err = <-done
		}
		if err != nil {
			t.Fatalf("leg %d: %v\n%s", attempt, err, out.String())
		}
		if _, err := os.Stat(filepath.Join(run, "summary.json")); err == nil {
			break
		}
	}
	t.Logf("killed %d times at random and %d times inside a checkpoint write", randomKills, checkpointKills)
	if randomKills < 2 || checkpointKills < 2 {
		t.Fatalf("only %d random and %d checkpoint kills landed; the run is too short to test", randomKills, checkpointKills)
	}
	a, b := metricsWithoutClock(t, full), metricsWithoutClock(t, run)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("metrics differ after kill and resume:\n%d lines vs %d", len(a), len(b))
	}
	for _, f := range []string{"adapter/adapter_model.safetensors", "adapter/adapter_config.json"} {
		x, _ := os.ReadFile(filepath.Join(full, f))
		y, _ := os.ReadFile(filepath.Join(run, f))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Fatalf("%s differs after kill and resume", f)
		}
	}
}

// waitForCheckpointWrite waits until a checkpoint write is under way (a
// temporary or set-aside checkpoint directory exists); false if the
// process ended first.
func waitForCheckpointWrite(root string, done chan error) bool {
	for {
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".tmp-") || strings.HasPrefix(e.Name(), ".old-") {
				return true
			}
		}
		select {
		case err := <-done:
			done <- err // for the caller to read
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitFor waits until path exists, failing if the process ends first.
func waitFor(t *testing.T, path string, done chan error) {
	t.Helper()
	for i := 0; i < 600; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("process ended before %s appeared: %v", path, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("%s never appeared", path)
}

func TestInterruptWritesCheckpointAndSaysHowToResume(t *testing.T) {
	if testing.Short() {
		t.Skip("signals training processes")
	}
	dir, recipe := workdir(t, 100000)
	run := filepath.Join(dir, "runs", "k")
	for _, twice := range []bool{false, true} {
		os.RemoveAll(run)
		cmd := mixtune("train", "-c", recipe)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		waitFor(t, filepath.Join(run, "checkpoints", "step-000007", "checkpoint.json"), done)
		cmd.Process.Signal(os.Interrupt)
		if twice {
			time.Sleep(5 * time.Millisecond)
			cmd.Process.Signal(os.Interrupt)
		}
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("twice=%v: the process did not stop", twice)
		}
		if code := cmd.ProcessState.ExitCode(); code != 130 {
			t.Fatalf("twice=%v: exit status %d, want 130\n%s", twice, code, out.String())
		}
		if !twice && !strings.Contains(out.String(), "Resume with:\n  mixtune train --resume "+run) {
			t.Fatalf("no resume instructions:\n%s", out.String())
		}
		// either way the newest checkpoint is whole: its files match checkpoint.json
		verifyNewestCheckpoint(t, filepath.Join(run, "checkpoints"))
		if !twice {
			// resuming under a changed recipe lists the change and needs --force
			res, err := mixtune("train", "--resume", run, "--set", "train.steps=30").CombinedOutput()
			if err == nil || !strings.Contains(string(res), "train.steps: 100000 → 30") || !strings.Contains(string(res), "--force") {
				t.Fatalf("resume with a changed recipe: %v\n%s", err, res)
			}
		}
	}
}

func verifyNewestCheckpoint(t *testing.T, root string) {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var newest string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "step-") && e.Name() > newest {
			newest = e.Name()
		}
	}
	b, err := os.ReadFile(filepath.Join(root, newest, "checkpoint.json"))
	if err != nil {
		t.Fatalf("newest checkpoint %s: %v", newest, err)
	}
	var man struct{ SHA256 map[string]string }
	if err := json.Unmarshal(b, &man); err != nil || len(man.SHA256) != 4 {
		t.Fatalf("checkpoint.json: %v %v", err, man)
	}
	for f, want := range man.SHA256 {
		data, err := os.ReadFile(filepath.Join(root, newest, f))
		if err != nil || fmt.Sprintf("%x", sha256.Sum256(data)) != want {
			t.Fatalf("%s/%s does not match its checksum", newest, f)
		}
	}
}

// version writes to the stdout it is given (it used to print to the
// process's own).
func TestVersionWritesToItsStdout(t *testing.T) {
	code, out, _ := runIn(t, "version")
	if code != 0 || out != "mixtune "+train.Version+"\n" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--help"}, 0},
		{[]string{"train", "--help"}, 0},
		{[]string{"nonsense"}, 2},
		{[]string{"train"}, 2},
		{[]string{"train", "-c", "/nonexistent.yaml"}, 2},
		{[]string{"eval", "--model", "x"}, 2},
		{[]string{"train", "--bogus"}, 2},
		{[]string{"bench", "--seq", "0"}, 2},
		{[]string{"bench", "--dim", "100", "--heads", "8"}, 2},
	} {
		var out bytes.Buffer
		if got := (app{}).run(tc.args, &out, &out); got != tc.code {
			t.Errorf("mixtune %v: exit %d, want %d\n%s", tc.args, got, tc.code, out.String())
		}
	}
}

// Bad input of every kind exits 2 with a message naming what is wrong and
// where, and leaves no run directory; a failure while running exits 1.
// (Dataset errors, bad flag values and the NaN temperature used to exit 1
// or be accepted.)
func TestBadInputExitsTwo(t *testing.T) {
	dir, recipe := workdir(t, 5)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badJSON := write("bad.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": 3, \"completion\": \"b\"}\n")
	latin1 := write("latin1.jsonl", "{\"text\": \"caf\xe9\"}\n")
	empty := write("empty.jsonl", "\n")
	modelDir := filepath.Join(dir, "model")
	nanModel, _ := tinyBase(t, filepath.Join(dir, "nan"))
	m, err := model.Load(nanModel)
	if err != nil {
		t.Fatal(err)
	}
	m.Weights["model.layers.0.self_attn.v_proj.weight"].Data[0] = float32(math.NaN())
	if err := m.Save(nanModel, amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "-c", recipe, "--set", "data.train=" + badJSON}, `bad.jsonl:2: "prompt" must be a string`},
		{[]string{"train", "-c", recipe, "--set", "data.train=" + latin1}, "latin1.jsonl:1: invalid UTF-8 at byte 14 of the line"},
		{[]string{"train", "-c", recipe, "--set", "data.train=" + empty}, "empty.jsonl: no examples"},
		{[]string{"train", "-c", recipe, "--set", "data.seq_len=2"}, "no training example has a target token within data.seq_len 2"},
		{[]string{"train", "-c", recipe, "--set", "task.eval_file=" + badJSON}, `bad.jsonl:2: "prompt" must be a string`},
		{[]string{"train", "-c", recipe, "--set", "model.path=" + nanModel}, "tensor model.layers.0.self_attn.v_proj.weight holds a non-finite value (NaN at index 0)"},
		{[]string{"train", "-c", recipe, "--set", "precision=fp8"}, `precision: unknown precision "fp8"`},
		{[]string{"train", "-c", recipe, "--set", "name=a\n---\nname: b"}, "second YAML document"},
		{[]string{"eval", "--model", modelDir, "--data", badJSON, "--seq-len", "16"}, `bad.jsonl:2: "prompt" must be a string`},
		{[]string{"eval", "--model", modelDir, "--data", empty, "--mode", "bogus"}, `invalid value "bogus" for flag -mode: must be pad or pack`},
		{[]string{"eval", "--model", modelDir, "--data", empty, "--blas", "cuda"}, `invalid value "cuda" for flag -blas: unknown matmul backend "cuda"`},
		{[]string{"bench", "--precision", "fp8"}, `invalid value "fp8" for flag -precision: unknown precision "fp8"`},
		{[]string{"bench", "--heads", "8", "--kv-heads", "3"}, "--kv-heads 3 must divide --heads 8"},
		{[]string{"bench", "--warmup", "-1"}, "--warmup must be 0 or more, got -1"},
		{[]string{"bench", "--profile"}, "--profile: the profile is of the Vulkan engine's GPU kernels; give --vulkan-device"},
		{[]string{"bench", "--cpuprofile", filepath.Join(dir, "no-such-dir", "cpu.prof")}, "--cpuprofile: open " + filepath.Join(dir, "no-such-dir", "cpu.prof")},
		{[]string{"generate", "--model", modelDir, "--prompt", "x", "--temperature", "NaN"}, "--temperature must be a finite number >= 0, got NaN"},
		{[]string{"extract-lora", "--base", modelDir, "--tuned", nanModel, "--rank", "2", "--out", filepath.Join(dir, "x")}, "tensor model.layers.0.self_attn.v_proj.weight holds a non-finite value"},
	} {
		code, _, stderr := runIn(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("mixtune %q: exit %d, want 2 with %q\n%s", tc.args, code, tc.want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "runs")); !os.IsNotExist(err) {
		t.Error("a run directory was created by a run that could not start")
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Error("extract-lora wrote its output for a NaN model")
	}
}

// `mixtune tokenize` shows ids with the text each covers, renders a chat
// template first with --chat, and --decode goes back.
func TestTokenizeCommand(t *testing.T) {
	dir, _ := workdir(t, 1)
	model := filepath.Join(dir, "model")
	code, out, stderr := runIn(t, "tokenize", "--model", model, "--json", "hé")
	var got struct {
		IDs     []int    `json:"ids"`
		Offsets [][2]int `json:"offsets"`
		Tokens  []string `json:"tokens"`
		Note    string   `json:"note"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("exit %d: %s %s", code, out, stderr)
	}
	if fmt.Sprint(got.IDs) != "[104 195 169]" || fmt.Sprint(got.Offsets) != "[[0 1] [1 2] [2 3]]" || !strings.Contains(got.Note, "BOS (id 256)") {
		t.Errorf("%+v", got)
	}
	if code, out, _ := runIn(t, "tokenize", "--model", model, "--decode", "104, 195 169"); code != 0 || out != "hé\n" {
		t.Errorf("decode: exit %d, %q", code, out)
	}
	code, out, _ = runIn(t, "tokenize", "--model", model, "--chat", "--chat-template", "chatml", `[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]`)
	if code != 0 || !strings.Contains(out, "rendered with built-in chatml:\n<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n") {
		t.Errorf("chat: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tokenize", "--model", model, "--chat", "x"}, "--chat needs a chat template"},
		{[]string{"tokenize", "--model", model, "--decode", "1 999"}, `--decode: "999" is not a token id of this tokenizer (0 to 258)`},
		{[]string{"tokenize", "--model", model, "--chat", "--chat-template", "chatml", `[{"role": "bot", "content": "x"}]`}, `unknown role "bot"`},
		{[]string{"tokenize", "--model", model, "--chat-template", "nope", "x"}, `unknown chat template "nope"`},
		{[]string{"tokenize", "--model", model}, "give the input as one argument or with --file"},
	} {
		if code, _, stderr := runIn(t, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, %s", tc.args, code, stderr)
		}
	}
}
