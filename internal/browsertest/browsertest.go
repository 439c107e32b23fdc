// Package browsertest drives a headless Chromium from Go tests (through
// chromedp), for the pages mixtune serves. A test that needs the browser
// calls Start, which skips the test where no Chromium is installed.
package browsertest

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium is the path of a Chromium or Chrome to drive; "" when none is
// installed.
func Chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Start opens a headless browser tab for the test, closed when the test
// ends, or skips the test where there is no Chromium.
func Start(t *testing.T) context.Context {
	t.Helper()
	exe := Chromium()
	if exe == "" {
		t.Skip("no chromium on PATH (Debian: apt-get install chromium): the browser test is skipped")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	return ctx
}

// Open loads url and waits until the element sel is visible.
func Open(t *testing.T, ctx context.Context, url, sel string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
}

// Eval runs a JavaScript expression in the page, awaiting a promise, and
// returns its value.
func Eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// IntAttr is an integer attribute of the first element matching sel; 0
// when there is none.
func IntAttr(t *testing.T, ctx context.Context, sel, attr string) int {
	t.Helper()
	v := Eval[string](t, ctx, `(document.querySelector(`+strconv.Quote(sel)+`) || {getAttribute: () => "0"}).getAttribute(`+strconv.Quote(attr)+`) || "0"`)
	n, _ := strconv.Atoi(v)
	return n
}

// Status is what the page's own fetch of path answers.
func Status(t *testing.T, ctx context.Context, path string) int {
	t.Helper()
	return Eval[int](t, ctx, `fetch(`+strconv.Quote(path)+`).then(r => r.status)`)
}

// WaitFor polls until cond holds, failing the test after timeout.
func WaitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Screenshot is a PNG of the whole page.
func Screenshot(t *testing.T, ctx context.Context) []byte {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	return png
}
