package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/internal/flock"
)

const metricsGood = `{"step":0,"val_loss":3.5,"val_ppl":33}
{"step":1,"loss":3.4,"lr":0.001,"grad_norm":1.5,"tokens_per_s":100,"loss_scale":65536}
{"step":2,"loss":"NaN","lr":0.002,"grad_norm":"+Inf","tokens_per_s":110,"loss_scale":32768}
{"step":2,"val_loss":3.1,"val_ppl":22}
`

// runsDir makes a runs directory: a finished, an interrupted, a failed
// and a running run, and one whose metrics.jsonl is torn and damaged.
func runsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(run, file, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, run), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, run, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	recipe := func(run, lr string) {
		write(run, resolvedFile, "name: "+run+"\nprecision: fp16\nadapter:\n  type: lora\n  r: 8\ntrain:\n  steps: 2\noptimizer:\n  lr: "+lr+"\n")
	}
	for _, run := range []string{"done", "stopped", "crashed", "live"} {
		write(run, metricsFile, metricsGood)
		recipe(run, "0.001")
	}
	write("done", summaryFile, `{"steps":2,"precision":"fp16","task_after":{"accuracy":0.75,"samples":[{"prompt":"1+1=","got":"2","want":"2"}]},"engine":"cpu","backend":"native"}`)
	write("stopped", summaryFile, `{"steps":1,"interrupted":true}`)
	recipe("stopped", "0.01")
	l, err := flock.Acquire(filepath.Join(dir, "live", lockFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Unlock() })
	// a line damaged in the middle, and one torn by a writer mid-line
	write("torn", metricsFile, "{\"step\":1,\"loss\":2}\n{not json\n{\"step\":2,\"loss\":1.5}\n{\"step\":3,\"lo")
	write("torn", summaryFile, "{truncated")
	if err := os.Mkdir(filepath.Join(dir, "not-a-run"), 0o755); err != nil {
		t.Fatal(err)
	}
	// a file outside the runs directory, and links to it from inside
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outside, metricsFile), []byte(metricsGood), 0o644)
	os.WriteFile(filepath.Join(outside, resolvedFile), []byte("name: secret\n"), 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "leaky"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("leaky", metricsFile, metricsGood)
	if err := os.Symlink(filepath.Join(outside, resolvedFile), filepath.Join(dir, "leaky", resolvedFile)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func serve(t *testing.T, dir string) *httptest.Server {
	t.Helper()
	s, err := New(dir, Options{LocalOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { ts.Close(); s.Close() })
	return ts
}

// get fetches path (sent as written, not cleaned by the client), without
// following redirects.
func get(t *testing.T, ts *httptest.Server, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = path
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestRunsList(t *testing.T) {
	ts := serve(t, runsDir(t))
	code, body := get(t, ts, "GET", "/api/runs")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var got struct{ Runs []RunInfo }
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	byName := map[string]RunInfo{}
	var names []string
	for _, r := range got.Runs {
		byName[r.Name] = r
		names = append(names, r.Name)
	}
	// not-a-run has no metrics; linked is a link out of the directory
	if want := "crashed done leaky live stopped torn"; strings.Join(names, " ") != want {
		t.Fatalf("runs %q, want %q", names, want)
	}
	for _, tc := range []struct{ run, status string }{
		{"done", "finished"}, {"stopped", "interrupted"}, {"crashed", "failed"}, {"live", "running"},
	} {
		r := byName[tc.run]
		if r.Status != tc.status || r.Error != "" {
			t.Errorf("%s: status %q (error %q), want %q", tc.run, r.Status, r.Error, tc.status)
		}
	}
	done := byName["done"]
	if done.Recipe != "done" || done.Adapter != "lora" || done.Precision != "fp16" || done.Steps != 2 || done.Step != 2 ||
		done.BestValLoss == nil || *done.BestValLoss != 3.1 || done.TaskAccuracy == nil || *done.TaskAccuracy != 0.75 {
		t.Errorf("done: %+v", done)
	}
	if r := byName["torn"]; r.Error != "" || len(r.Problems) != 3 || !strings.Contains(r.Problems[0], "torn/metrics.jsonl:2") ||
		!strings.Contains(r.Problems[2], "torn/summary.json") {
		t.Errorf("torn: want the bad lines and the damaged summary.json as problems, got %+v", r)
	}
	if r := byName["leaky"]; r.Error == "" {
		t.Errorf("leaky: a recipe linked from outside was read: %+v", r)
	}
}

func TestMetricsSurviveBadLines(t *testing.T) {
	ts := serve(t, runsDir(t))
	tests := []struct {
		run     string
		loss    []float64
		skipped int
	}{
		{"done", []float64{3.4}, 0},    // step 2's NaN is a gap
		{"torn", []float64{2, 1.5}, 3}, // two bad lines, and summary.json
	}
	for _, tc := range tests {
		t.Run(tc.run, func(t *testing.T) {
			code, body := get(t, ts, "GET", "/api/runs/"+tc.run+"/metrics")
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			var got struct {
				Series   map[string]series
				Problems []string
			}
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			if l := got.Series["loss"].Values; len(l) != len(tc.loss) || l[0] != tc.loss[0] || len(got.Problems) != tc.skipped {
				t.Fatalf("loss %v problems %q, want %v and %d: %s", l, got.Problems, tc.loss, tc.skipped, body)
			}
		})
	}
	// a line appended, as by a training run, is served at the next poll
	dir := runsDir(t)
	ts2 := serve(t, dir)
	f, err := os.OpenFile(filepath.Join(dir, "live", metricsFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := func() int {
		_, body := get(t, ts2, "GET", "/api/runs/live/metrics")
		var got struct{ Series map[string]series }
		json.Unmarshal([]byte(body), &got)
		return len(got.Series["lr"].Steps)
	}
	before := count()
	f.WriteString(`{"step":3,"loss":2.9,"lr":0.003}` + "\n" + `{"step":4,"lo`)
	if after := count(); after != before+1 {
		t.Fatalf("lr points %d after a line and a half were appended, want %d", after, before+1)
	}
}

func TestTraversalAndForeignHostsRefused(t *testing.T) {
	dir := runsDir(t)
	ts := serve(t, dir)
	srv := ts.Config.Handler
	for _, path := range []string{
		"/api/runs/..%2F..%2Fetc/metrics",
		"/api/runs/../done/metrics",
		"/api/runs/%2e%2e/metrics",
		"/api/runs/..%5Cdone/metrics",
		"/api/runs/nope/metrics",
		"/api/runs/not-a-run/detail",
		"/api/runs/linked/metrics",
		"/api/runs/linked/detail",
		"/api/runs/.hidden/metrics",
		"/../../../etc/passwd",
		"/..%2f..%2fetc/passwd",
		"/api/diff?a=done&b=..%2F..%2Fsecret",
		"/api/diff?a=done&b=linked",
		"/done/metrics.jsonl",
		"/nope.html",
	} {
		if code, body := get(t, ts, "GET", path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404: %.200s", path, code, body)
		}
	}
	// a page elsewhere whose name points at 127.0.0.1 (DNS rebinding)
	for host, want := range map[string]int{"evil.example:80": http.StatusForbidden, "evil.example": http.StatusForbidden,
		"localhost:8080": http.StatusOK, "127.0.0.1": http.StatusOK, "[::1]:8080": http.StatusOK} {
		req := httptest.NewRequest("GET", "/api/runs", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %s: %d, want %d", host, rec.Code, want)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE"} {
		if code, _ := get(t, ts, m, "/api/runs"); code != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d, want 405", m, code)
		}
	}
}

func TestDetailAndDiff(t *testing.T) {
	ts := serve(t, runsDir(t))
	code, body := get(t, ts, "GET", "/api/runs/done/detail")
	if code != 200 || !strings.Contains(body, `"recipe":"name: done`) || !strings.Contains(body, `"engine":"cpu"`) || !strings.Contains(body, `"got":"2"`) {
		t.Fatalf("%d %s", code, body)
	}
	code, body = get(t, ts, "GET", "/api/diff?a=done&b=stopped")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var got struct{ Changes []Change }
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range got.Changes {
		lines = append(lines, c.Key+": "+*c.A+" → "+*c.B)
	}
	if want := `name: "done" → "stopped"; optimizer.lr: 0.001 → 0.01`; strings.Join(lines, "; ") != want {
		t.Fatalf("diff %q, want %q", lines, want)
	}
}

func TestDiffRecipes(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		a, b map[string]any
		want []Change
	}{
		{"same", map[string]any{"x": 1}, map[string]any{"x": 1}, []Change{}},
		{"nested value", map[string]any{"t": map[string]any{"s": 1, "k": "a"}}, map[string]any{"t": map[string]any{"s": 2, "k": "a"}},
			[]Change{{"t.s", str("1"), str("2")}}},
		{"only in one", map[string]any{"a": true}, map[string]any{"b": []any{"q", "v"}},
			[]Change{{"a", str("true"), nil}, {"b", nil, str(`["q","v"]`)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := DiffRecipes(tc.a, tc.b)
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tc.want)
			if string(gb) != string(wb) {
				t.Fatalf("%s, want %s", gb, wb)
			}
		})
	}
}

// The page and its script are embedded and load nothing from elsewhere.
func TestPageIsSelfContained(t *testing.T) {
	ts := serve(t, runsDir(t))
	for _, path := range []string{"/", "/app.js"} {
		code, body := get(t, ts, "GET", path)
		if code != 200 || len(body) < 500 {
			t.Fatalf("GET %s: %d, %d bytes", path, code, len(body))
		}
		for _, line := range strings.Split(body, "\n") {
			if (strings.Contains(line, "http://") || strings.Contains(line, "https://")) && !strings.Contains(line, "http://www.w3.org/2000/svg") {
				t.Errorf("%s loads from elsewhere: %s", path, strings.TrimSpace(line))
			}
		}
	}
}
