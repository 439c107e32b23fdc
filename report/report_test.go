package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"

	"github.com/mixtune/mixtune/internal/flock"
)

func writeRun(t *testing.T, name, metrics, summary string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(metrics), 0o644)
	if summary != "" {
		os.WriteFile(filepath.Join(dir, "summary.json"), []byte(summary), 0o644)
	}
	return dir
}

const metricsA = `{"step":0,"val_loss":2.5,"val_ppl":12.18}
{"step":1,"loss":2.4,"lr":0.001,"grad_norm":1.5,"skipped":false,"grad_zero_frac":0.5,"grad_underflow_frac":0.125,"loss_scale":65536,"tokens_per_s":100,"elapsed_s":1}
{"step":2,"loss":2.0,"lr":0.0005,"grad_norm":1.2,"skipped":true,"grad_zero_frac":0.25,"grad_underflow_frac":0.375,"loss_scale":32768,"tokens_per_s":110,"elapsed_s":2}
{"step":2,"val_loss":1.9,"val_ppl":6.69}
`

func TestReadCompareCSV(t *testing.T) {
	dir := writeRun(t, "fp16", metricsA, `{"steps":2,"precision":"fp16","val_after":{"loss":1.9},"task_after":{"accuracy":0.875},"skipped_steps":1,"tokens_per_s":105,"peak_rss_bytes":104857600}`)
	r, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Steps) != 2 || len(r.Val) != 2 || r.Steps[1].Fields["skipped"] != 1 {
		t.Fatalf("read %d step lines, %d validation lines: %+v", len(r.Steps), len(r.Val), r.Steps)
	}
	var buf bytes.Buffer
	if err := Compare(&buf, []*Run{r}); err != nil {
		t.Fatal(err)
	}
	want := "| run | status | step | backend | precision | val loss | task accuracy | skipped steps | zero weight grads (mean) | grads underflowed (mean) | loss scale | tokens/s | peak RSS |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n" +
		"| fp16 | finished | 2 | - | fp16 | 1.9000 | 87.5% | 1 | 37.50% | 25.00% | 32768 | 105 | 100 MiB |\n"
	if buf.String() != want {
		t.Fatalf("compare:\n%s\nwant\n%s", buf.String(), want)
	}
	// a run on the Vulkan engine adds its device's peak, "-" for the others
	gpu, err := Read(writeRun(t, "gpu", metricsA, `{"steps":2,"precision":"bf16","tokens_per_s":900,"peak_rss_bytes":52428800,"device_peak_bytes":1181116006}`))
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := Compare(&buf, []*Run{r, gpu}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	if !strings.HasSuffix(lines[0], "| peak RSS | device peak |") || !strings.HasSuffix(lines[2], "| 100 MiB | - |") || !strings.HasSuffix(lines[3], "| 50 MiB | 1126 MiB |") {
		t.Fatalf("compare with a Vulkan run:\n%s", buf.String())
	}
	if err := WriteCSV(r); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "metrics.csv"))
	wantCSV := "step,loss,val_loss,val_ppl,lr,grad_norm,loss_scale,skipped,grad_zero_frac,grad_underflow_frac,tokens_per_s,elapsed_s\n" +
		"0,,2.5,12.18,,,,,,,,\n" +
		"1,2.4,,,0.001,1.5,65536,0,0.5,0.125,100,1\n" +
		"2,2,,,0.0005,1.2,32768,1,0.25,0.375,110,2\n" +
		"2,,1.9,6.69,,,,,,,,\n"
	if string(b) != wantCSV {
		t.Fatalf("metrics.csv:\n%s\nwant\n%s", b, wantCSV)
	}
}

func TestPlotAll(t *testing.T) {
	a, _ := Read(writeRun(t, "a", metricsA, ""))
	b, _ := Read(writeRun(t, "b", strings.ReplaceAll(metricsA, `"loss_scale":65536,`, ""), ""))
	out := t.TempDir()
	files, err := PlotAll(out, []*Run{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("wrote %v", files)
	}
	for _, f := range files {
		png, err := os.ReadFile(f)
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n")) || len(png) < 1000 {
			t.Fatalf("%s is not a PNG (%v)", f, err)
		}
	}
	// a curve no run has is left out rather than drawn empty
	noScale, _ := Read(writeRun(t, "c", strings.ReplaceAll(strings.ReplaceAll(metricsA, `"loss_scale":65536,`, ""), `"loss_scale":32768,`, ""), ""))
	files, err = PlotAll(t.TempDir(), []*Run{noScale})
	if err != nil || len(files) != 2 {
		t.Fatalf("without loss scale: %v, %v", files, err)
	}
	if err := Plot(filepath.Join(out, "x.png"), Curve{Field: "nope"}, []*Run{a}); err == nil {
		t.Fatal("plotting a field no run has succeeded")
	}
}

// A DPO run's metrics.jsonl: its validation pairs before and after
// training, and two logged steps.
const metricsDPO = `{"eval_logps/chosen":-25.2,"eval_logps/rejected":-25.9,"eval_loss":0.6931471805599453,"eval_rewards/accuracies":0,"eval_rewards/chosen":0,"eval_rewards/margins":0,"eval_rewards/rejected":0,"step":0}
{"elapsed_s":5,"grad_norm":0.25,"logps/chosen":-26.5,"logps/rejected":-27.75,"loss":0.65,"lr":0.0018,"rewards/accuracies":0.75,"rewards/chosen":-0.125,"rewards/margins":0.125,"rewards/rejected":-0.25,"skipped":false,"step":10,"tokens_per_s":734}
{"elapsed_s":9,"grad_norm":0.5,"logps/chosen":-30,"logps/rejected":-35,"loss":0.5,"lr":0.001,"rewards/accuracies":0.875,"rewards/chosen":-0.5,"rewards/margins":0.5,"rewards/rejected":-1,"skipped":false,"step":20,"tokens_per_s":750}
{"eval_logps/chosen":-39,"eval_logps/rejected":-42.5,"eval_loss":0.625,"eval_rewards/accuracies":0.905,"eval_rewards/chosen":-1.375,"eval_rewards/margins":0.25,"eval_rewards/rejected":-1.625,"step":20}
`

// compare shows a preference run's metrics under TRL's names: the
// validation pairs' after training (summary.json's, else the latest
// evaluation's), or, without validation pairs, the last step's; its val
// loss is the pairs' loss. A supervised run beside it shows "-" there, and
// a table of supervised runs alone has no such columns. plot draws reward
// accuracy and margin (steps as lines, validation pairs as markers), the
// rewards and the log-probabilities.
func TestPreferenceRunsInCompareAndPlot(t *testing.T) {
	const summary = `{"steps":20,"precision":"fp32","tokens_per_s":740,"preference_after":{"eval_loss":0.625,"eval_rewards/accuracies":0.905,"eval_rewards/margins":0.25,"eval_rewards/chosen":-1.375,"eval_rewards/rejected":-1.625,"eval_logps/chosen":-39,"eval_logps/rejected":-42.5}}`
	done, err := Read(writeRun(t, "dpo", metricsDPO, summary))
	if err != nil {
		t.Fatal(err)
	}
	if len(done.EvalPairs) != 2 || len(done.Steps) != 2 || len(done.Val) != 0 {
		t.Fatalf("read %d evaluations of pairs, %d steps, %d validations", len(done.EvalPairs), len(done.Steps), len(done.Val))
	}
	// running: no summary, the latest evaluation; no validation pairs: the last step
	running, _ := Read(writeRun(t, "running", metricsDPO, ""))
	var steps []string
	for _, l := range strings.Split(metricsDPO, "\n") {
		if strings.Contains(l, `"loss":`) && !strings.Contains(l, "eval_") {
			steps = append(steps, l)
		}
	}
	noVal, _ := Read(writeRun(t, "noval", strings.Join(steps, "\n")+"\n", ""))
	sft, _ := Read(writeRun(t, "sft", metricsA, ""))
	var buf bytes.Buffer
	if err := Compare(&buf, []*Run{done, running, noVal, sft}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	wantHead := " | rewards/accuracies | rewards/margins | rewards/chosen | rewards/rejected | logps/chosen | logps/rejected |"
	want := []string{
		"| dpo | finished | 20 | - | fp32 | 0.6250 | - | 0 | - | - | - | 740 | - | 90.5% | 0.2500 | -1.3750 | -1.6250 | -39.0000 | -42.5000 |",
		"| running | failed | 20 | - | - | 0.6250 | - | 0 | - | - | - | 750 | - | 90.5% | 0.2500 | -1.3750 | -1.6250 | -39.0000 | -42.5000 |",
		"| noval | failed | 20 | - | - | - | - | 0 | - | - | - | 750 | - | 87.5% | 0.5000 | -0.5000 | -1.0000 | -30.0000 | -35.0000 |",
		"| sft | failed | 2 | - | - | 1.9000 | - | 1 | 37.50% | 25.00% | 32768 | 110 | - | - | - | - | - | - | - |",
	}
	if len(lines) != 6 || !strings.HasSuffix(lines[0], wantHead) || !slices.Equal(lines[2:], want) {
		t.Fatalf("compare:\n%s\nwant the header to end\n%s\nand rows\n%s", buf.String(), wantHead, strings.Join(want, "\n"))
	}
	buf.Reset()
	Compare(&buf, []*Run{sft})
	if strings.Contains(buf.String(), "rewards/") {
		t.Errorf("a table of supervised runs has preference columns:\n%s", buf.String())
	}
	files, err := PlotAll(t.TempDir(), []*Run{done, noVal})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if wantFiles := []string{"loss.png", "lr.png", "reward_accuracy.png", "reward_margin.png", "rewards.png", "logps.png"}; !slices.Equal(names, wantFiles) {
		t.Fatalf("plots %v, want %v", names, wantFiles)
	}
	acc := StandardCurves[3].Curve
	p, err := newPlot(acc, []*Run{done})
	if err != nil || p.Y.Min != 0 || p.Y.Max < 1 {
		t.Fatalf("reward accuracy axis %v to %v (%v)", p.Y.Min, p.Y.Max, err)
	}
	if got := len(evalPoints(done, acc)); got != 2 {
		t.Errorf("%d validation points", got)
	}
}

func evalPoints(r *Run, c Curve) plotter.XYs { return points(r.EvalPairs, "eval_"+c.Field, false) }

func TestReadReportsTornLine(t *testing.T) {
	dir := writeRun(t, "torn", metricsA+`{"step":3,"lo`, "")
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "metrics.jsonl:5:") {
		t.Fatalf("torn line: %v", err)
	}
}

// compare gives every run a status read from its directory and a backend
// (summary.json's, else run.json's), and shows a run that has no summary
// (running, or failed) with the latest values of metrics.jsonl rather
// than "-" everywhere. A running leg of a resumed run ignores the old
// leg's summary. (compare used to print "-" for all of a running run.)
func TestCompareStatusAndBackend(t *testing.T) {
	const manifest = `{"blas":"openblas 0.3.21 (Haswell)","precision":"bf16"}`
	const interrupted = `{"steps":2,"interrupted":true,"precision":"bf16","skipped_steps":1,"tokens_per_s":99,"peak_rss_bytes":1048576}`
	for _, tc := range []struct {
		name, summary, manifest string
		locked                  bool
		want                    string
	}{
		{"finished", `{"steps":2,"backend":"native (Go, avx512 kernel)","precision":"bf16","val_after":{"loss":1.9},"skipped_steps":1,"tokens_per_s":105,"peak_rss_bytes":1048576}`, manifest, false,
			"| finished | finished | 2 | native (Go, avx512 kernel) | bf16 | 1.9000 | - | 1 | 37.50% | 25.00% | 32768 | 105 | 1 MiB |"},
		{"interrupted", interrupted, manifest, false,
			"| interrupted | interrupted | 2 | openblas 0.3.21 (Haswell) | bf16 | 1.9000 | - | 1 | 37.50% | 25.00% | 32768 | 99 | 1 MiB |"},
		{"running", "", manifest, true,
			"| running | running | 2 | openblas 0.3.21 (Haswell) | bf16 | 1.9000 | - | 1 | 37.50% | 25.00% | 32768 | 110 | - |"},
		{"resumed", interrupted, manifest, true,
			"| resumed | running | 2 | openblas 0.3.21 (Haswell) | bf16 | 1.9000 | - | 1 | 37.50% | 25.00% | 32768 | 110 | - |"},
		{"failed", "", "", false,
			"| failed | failed | 2 | - | - | 1.9000 | - | 1 | 37.50% | 25.00% | 32768 | 110 | - |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRun(t, tc.name, metricsA, tc.summary)
			if tc.manifest != "" {
				os.WriteFile(filepath.Join(dir, "run.json"), []byte(tc.manifest), 0o644)
			}
			if tc.locked {
				l, err := flock.Acquire(filepath.Join(dir, lockFile))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Unlock()
			} else {
				// a lock file a finished process left behind is not a running run
				os.WriteFile(filepath.Join(dir, lockFile), []byte("1\n"), 0o644)
			}
			r, err := Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := Compare(&buf, []*Run{r}); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if got := lines[len(lines)-1]; got != tc.want {
				t.Fatalf("row\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	dir := writeRun(t, "bad", metricsA, "")
	os.WriteFile(filepath.Join(dir, "run.json"), []byte("{"), 0o644)
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "run.json") {
		t.Fatalf("a damaged run.json: %v", err)
	}
}

// The loss and learning-rate axes start at 0 and say so where the label
// is read; the step axis starts at 0; overlaid runs differ in color and
// dash pattern (training) and marker (validation), so that coinciding
// curves stay apart. (Validation was dashed for every run, the loss axis
// started wherever the data did.)
func TestPlotLayout(t *testing.T) {
	a, _ := Read(writeRun(t, "a", metricsA, ""))
	d, _ := Read(writeRun(t, "dpo", metricsDPO, ""))
	for _, sc := range StandardCurves {
		run := a
		if !anyHas([]*Run{a}, sc.Curve.Field) {
			run = d
		}
		p, err := newPlot(sc.Curve, []*Run{run})
		if err != nil {
			t.Fatal(err)
		}
		if p.X.Min != 0 {
			t.Errorf("%s: step axis from %g", sc.File, p.X.Min)
		}
		// (the margins of a DPO run start at 0 where policy = reference)
		if sc.Curve.ZeroY != (p.Y.Min == 0) && run == a || sc.Curve.ZeroY && p.Y.Min != 0 {
			t.Errorf("%s: y axis from %g", sc.File, p.Y.Min)
		}
	}
	if loss := StandardCurves[0].Curve; !loss.ZeroY || !strings.Contains(loss.Label, "from 0") {
		t.Errorf("loss axis: from 0 %v, label %q", loss.ZeroY, loss.Label)
	}
	seen := map[string]int{}
	for i := 0; i < len(dashes); i++ {
		ls := lineStyle(i)
		key := fmt.Sprint(ls.Color, ls.Dashes)
		if j, dup := seen[key]; dup {
			t.Errorf("runs %d and %d are drawn alike", j, i)
		}
		seen[key] = i
		if ls2 := lineStyle(i + 1); fmt.Sprint(ls2.Dashes) == fmt.Sprint(ls.Dashes) {
			t.Errorf("runs %d and %d share a dash pattern", i, i+1)
		}
	}
	glyphSeen := map[string]bool{}
	for _, g := range glyphs {
		glyphSeen[fmt.Sprintf("%T", g)] = true
	}
	if len(glyphSeen) != len(glyphs) {
		t.Errorf("%d markers for %d runs", len(glyphSeen), len(glyphs))
	}
}
