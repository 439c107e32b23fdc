package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	dir := writeRun(t, "fp16", metricsA, `{"precision":"fp16","val_after":{"loss":1.9},"task_after":{"accuracy":0.875},"skipped_steps":1,"tokens_per_s":105,"peak_rss_bytes":104857600}`)
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
	want := "| run | precision | final val loss | task accuracy | skipped steps | zero weight grads (mean) | grads underflowed (mean) | final loss scale | tokens/s | peak RSS |\n" +
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n" +
		"| fp16 | fp16 | 1.9000 | 87.5% | 1 | 37.50% | 25.00% | 32768 | 105 | 100 MiB |\n"
	if buf.String() != want {
		t.Fatalf("compare:\n%s\nwant\n%s", buf.String(), want)
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

func TestReadReportsTornLine(t *testing.T) {
	dir := writeRun(t, "torn", metricsA+`{"step":3,"lo`, "")
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "metrics.jsonl:5:") {
		t.Fatalf("torn line: %v", err)
	}
}
