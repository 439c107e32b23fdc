package dashboard

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mixtune/mixtune/internal/browsertest"
	"github.com/mixtune/mixtune/internal/flock"
)

// The dashboard in a real browser: a training run's chart gains points as
// its metrics.jsonl grows (a line at a time, a torn line included), two
// runs overlay, and the browser's own request for a path outside the runs
// directory is refused. MIXTUNE_DASHBOARD_SCREENSHOT=FILE.png keeps a
// screenshot of the page with both runs.
func TestDashboardInBrowser(t *testing.T) {
	ctx := browsertest.Start(t)
	dir := t.TempDir()
	for _, run := range []string{"a", "b"} {
		if err := os.MkdirAll(filepath.Join(dir, run), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, run, resolvedFile), []byte("name: "+run+"\ntrain:\n  steps: 50\n"), 0o644)
	}
	line := func(step int, loss float64) string {
		return fmt.Sprintf(`{"step":%d,"loss":%g,"lr":0.001,"grad_norm":1,"tokens_per_s":100,"loss_scale":1024}`+"\n", step, loss)
	}
	var finished string
	for s := 1; s <= 20; s++ {
		finished += line(s, 3-float64(s)/10)
	}
	os.WriteFile(filepath.Join(dir, "a", metricsFile), []byte(finished), 0o644)
	os.WriteFile(filepath.Join(dir, "a", summaryFile), []byte(`{"steps":20}`), 0o644)
	// b trains: its directory is locked, its metrics grow
	lock, err := flock.Acquire(filepath.Join(dir, "b", lockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	growing, err := os.OpenFile(filepath.Join(dir, "b", metricsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer growing.Close()
	growing.WriteString(line(1, 3.2) + line(2, 3.1))

	srv, err := New(dir, Options{LocalOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()

	const lossChart = `svg[data-chart="loss"]`
	points := func() int { return browsertest.IntAttr(t, ctx, lossChart, "data-points") }
	waitFor := func(what string, cond func() bool) { t.Helper(); browsertest.WaitFor(t, what, 15*time.Second, cond) }
	browsertest.Open(t, ctx, ts.URL+"/", lossChart)
	// at first the page shows the running run alone
	waitFor("b's 2 points", func() bool { return points() == 2 })

	// the run trains on: a step at a time, the last line torn mid-write
	growing.WriteString(line(3, 3.0) + line(4, 2.9) + `{"step":5,"lo`)
	waitFor("b's chart to gain points", func() bool { return points() == 4 })
	growing.WriteString(`ss":2.8}` + "\n")
	waitFor("the torn line, finished, to show", func() bool { return points() == 5 })

	// select a as well: both overlay on every chart
	browsertest.Eval[any](t, ctx, `document.querySelector('tr[data-run="a"] input').click()`)
	waitFor("a and b overlaid", func() bool { return points() == 25 })
	overlaid := browsertest.Eval[[]string](t, ctx, `[...document.querySelectorAll('svg[data-chart="loss"] path[data-run]')].map(p => p.dataset.run).sort()`)
	if fmt.Sprint(overlaid) != "[a b]" {
		t.Fatalf("loss chart lines %v, want a and b", overlaid)
	}
	statuses := browsertest.Eval[[]string](t, ctx, `[...document.querySelectorAll('#runs tbody tr')].map(r => r.dataset.run + ":" + r.querySelector('.status').textContent)`)
	if fmt.Sprint(statuses) != "[a:finished b:running]" {
		t.Fatalf("runs list %v", statuses)
	}

	// the two recipes' diff, and a run's resolved recipe
	browsertest.Eval[any](t, ctx, `document.getElementById("diffbtn").click()`)
	waitFor("the recipe diff", func() bool {
		return browsertest.Eval[string](t, ctx, `[...document.querySelectorAll('#diff tr[data-key]')].map(r => r.textContent).join(";")`) == `name"a""b"`
	})
	browsertest.Eval[any](t, ctx, `document.querySelector('tr[data-run="a"] a').click()`)
	waitFor("a's recipe", func() bool {
		return browsertest.Eval[string](t, ctx, `(document.querySelector('pre[data-recipe="a"]') || {}).textContent || ""`) == "name: a\ntrain:\n  steps: 50\n"
	})

	// the browser's own requests outside the runs directory are refused
	for _, path := range []string{"/api/runs/..%2F..%2Fetc/metrics", "/..%2F..%2Fetc%2Fpasswd", "/api/runs/a%2F..%2F..%2Fx/detail"} {
		if code := browsertest.Status(t, ctx, path); code != 404 {
			t.Errorf("the browser fetched %s: %d, want 404", path, code)
		}
	}

	if shot := os.Getenv("MIXTUNE_DASHBOARD_SCREENSHOT"); shot != "" {
		if err := os.WriteFile(shot, browsertest.Screenshot(t, ctx), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
