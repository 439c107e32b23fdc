// Package dashboard serves a read-only web view of a runs directory: the
// runs and their status, their curves overlaid and updating while they
// train, each run's resolved recipe, and the difference between two
// recipes. Everything it serves is embedded (no CDN): the page draws its
// own SVG charts and polls the JSON API.
//
// Only runs directly under the directory are served, each named by one
// path element and read through an os.Root, so no request reaches a file
// outside it: anything else is 404. A metrics.jsonl torn mid-write or
// damaged is read without its bad lines, never failing the page.
package dashboard

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/report"
	"gopkg.in/yaml.v3"
)

//go:embed static
var static embed.FS

// The files a run directory holds that the dashboard reads.
const (
	metricsFile  = "metrics.jsonl"
	resolvedFile = "resolved.yaml"
	summaryFile  = "summary.json"
	manifestFile = "run.json"
	lockFile     = ".lock"
)

// Server answers the dashboard's requests over one runs directory.
type Server struct {
	dir  string
	root *os.Root
	mux  *http.ServeMux
	opt  Options
}

// Options are how the dashboard is reached.
type Options struct {
	// LocalOnly answers only requests addressed to a loopback name or
	// address (localhost, 127.0.0.1, [::1]): a web page elsewhere whose
	// host name is pointed at 127.0.0.1 (DNS rebinding) still sends its
	// own name, and is refused. For a server listening on loopback.
	LocalOnly bool
}

// New serves the runs under dir. Close releases the directory.
func New(dir string, opt Options) (*Server, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	s := &Server{dir: dir, root: root, mux: http.NewServeMux(), opt: opt}
	page, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	s.mux.Handle("GET /", http.FileServerFS(page))
	s.mux.HandleFunc("GET /api/runs", s.runs)
	s.mux.HandleFunc("GET /api/runs/{name}/metrics", s.metrics)
	s.mux.HandleFunc("GET /api/runs/{name}/detail", s.detail)
	s.mux.HandleFunc("GET /api/diff", s.diff)
	return s, nil
}

// Close releases the runs directory.
func (s *Server) Close() error { return s.root.Close() }

// ServeHTTP answers GET and HEAD only (the dashboard changes nothing), and
// 404s any path with a dot-dot element before the mux would redirect it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "read-only", http.StatusMethodNotAllowed)
		return
	}
	if s.opt.LocalOnly && !loopbackHost(r.Host) {
		http.Error(w, "this dashboard answers only to localhost", http.StatusForbidden)
		return
	}
	if slices.Contains(strings.Split(r.URL.Path, "/"), "..") || strings.Contains(r.URL.Path, "\\") {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	s.mux.ServeHTTP(w, r)
}

// loopbackHost reports whether a Host header names this machine by a
// loopback name or address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// RunInfo is a runs-list row.
type RunInfo struct {
	Name         string   `json:"name"`
	Status       string   `json:"status"`
	Recipe       string   `json:"recipe,omitempty"` // the recipe's name: field
	Precision    string   `json:"precision,omitempty"`
	Adapter      string   `json:"adapter,omitempty"`
	Step         int      `json:"step"`            // the last step metrics.jsonl has
	Steps        int      `json:"steps,omitempty"` // the recipe's train.steps
	BestValLoss  *float64 `json:"best_val_loss,omitempty"`
	TaskAccuracy *float64 `json:"task_accuracy,omitempty"`
	// Problems are the damage the view read around: metrics lines that
	// did not parse, a damaged summary.json or run.json (the first few).
	Problems []string `json:"problems,omitempty"`
	Error    string   `json:"error,omitempty"` // why the run could not be read
}

// runNames lists the run directories: the directories under dir with a
// metrics.jsonl, symbolic links left out.
func (s *Server) runNames() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		if _, err := s.root.Stat(filepath.Join(e.Name(), metricsFile)); err == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// validName is a run name as a path element: no separators, nothing
// hidden, not . or ..
func validName(name string) bool {
	return name != "" && !strings.HasPrefix(name, ".") && !strings.ContainsAny(name, "/\\\x00")
}

// maxProblems caps the problems a response lists: a file of a million
// bad lines is told in a few and a count.
const maxProblems = 3

// open reads a run named by a request. ok is false for a name that is not
// a run directly under the directory (then 404); a run whose files lead
// out of the directory (symbolic links) counts as none.
func (s *Server) open(name string) (run *report.Run, problems []string, ok bool, err error) {
	if !validName(name) {
		return nil, nil, false, nil
	}
	if st, err := s.root.Lstat(name); err != nil || !st.IsDir() {
		return nil, nil, false, nil
	}
	if _, err := s.root.Stat(filepath.Join(name, metricsFile)); err != nil {
		return nil, nil, false, nil // not a run
	}
	for _, f := range []string{metricsFile, resolvedFile, summaryFile, manifestFile, lockFile} {
		p := filepath.Join(name, f)
		if _, err := s.root.Lstat(p); err != nil {
			continue // absent
		}
		if _, err := s.root.Stat(p); err != nil {
			return nil, nil, false, nil // a link out of the directory
		}
	}
	run, problems, err = report.ReadLive(filepath.Join(s.dir, name))
	if n := len(problems); n > maxProblems {
		problems = append(problems[:maxProblems], fmt.Sprintf("and %d more", n-maxProblems))
	}
	for i, p := range problems { // the runs directory is the page's heading
		problems[i] = strings.ReplaceAll(p, s.dir+string(filepath.Separator), "")
	}
	return run, problems, true, err
}

func (s *Server) runs(w http.ResponseWriter, _ *http.Request) {
	names, err := s.runNames()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := []RunInfo{}
	for _, n := range names {
		out = append(out, s.info(n))
	}
	writeJSON(w, map[string]any{"dir": s.dir, "runs": out})
}

// info is a run's row; a run that cannot be read is a row with its error.
func (s *Server) info(name string) RunInfo {
	ri := RunInfo{Name: name}
	run, problems, ok, err := s.open(name)
	if !ok {
		ri.Error = "not readable inside the runs directory"
		return ri
	}
	if err != nil {
		ri.Error = err.Error()
		return ri
	}
	ri.Status, ri.Problems = string(run.Status), problems
	if n := len(run.Steps); n > 0 {
		ri.Step = run.Steps[n-1].Step
	}
	for _, p := range run.Val {
		if v, ok := p.Fields["val_loss"]; ok && !math.IsNaN(v) && (ri.BestValLoss == nil || v < *ri.BestValLoss) {
			ri.BestValLoss = &v
		}
	}
	if acc, ok := dig(run.Summary, "task_after", "accuracy").(float64); ok {
		ri.TaskAccuracy = &acc
	}
	ri.Precision, _ = dig(run.Summary, "precision").(string)
	if ri.Precision == "" {
		ri.Precision, _ = dig(run.Manifest, "precision").(string)
	}
	if recipe, err := s.recipe(name); err == nil {
		ri.Recipe, _ = dig(recipe, "name").(string)
		ri.Adapter, _ = dig(recipe, "adapter", "type").(string)
		if steps, ok := dig(recipe, "train", "steps").(int); ok {
			ri.Steps = steps
		}
	}
	return ri
}

// dig follows keys down nested maps; nil where one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// readFile reads a run's file through the root, bounded as the trainer
// bounds its run records.
func (s *Server) readFile(name, file string) ([]byte, error) {
	f, err := s.root.Open(filepath.Join(name, file))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readlimit.ReadAll(f, filepath.Join(s.dir, name, file), readlimit.RunRecord)
}

// recipe is a run's resolved.yaml as a YAML tree.
func (s *Server) recipe(name string) (map[string]any, error) {
	b, err := s.readFile(name, resolvedFile)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", name, resolvedFile, err)
	}
	return m, nil
}

// series is one metric's points.
type series struct {
	Steps  []int     `json:"steps"`
	Values []float64 `json:"values"`
}

// chartFields are the metrics the page charts.
var chartFields = []string{"loss", "lr", "loss_scale", "grad_norm", "tokens_per_s"}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	run, problems, ok, err := s.open(r.PathValue("name"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	out := map[string]series{}
	add := func(field string, ps []report.Point) {
		for _, p := range ps {
			v, ok := p.Fields[field]
			if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
				continue // JSON has no NaN; the chart shows a gap
			}
			sr := out[field]
			sr.Steps, sr.Values = append(sr.Steps, p.Step), append(sr.Values, v)
			out[field] = sr
		}
	}
	for _, f := range chartFields {
		add(f, run.Steps)
	}
	add("val_loss", run.Val)
	writeJSON(w, map[string]any{"name": run.Name, "status": run.Status, "series": out, "problems": problems})
}

func (s *Server) detail(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	run, _, ok, err := s.open(name)
	if !ok {
		http.NotFound(w, r)
		return
	}
	resolved, rerr := s.readFile(name, resolvedFile)
	d := map[string]any{"name": name, "recipe": string(resolved)}
	if rerr != nil {
		d["recipe_error"] = "no " + resolvedFile
	}
	if err != nil {
		d["error"] = err.Error()
	} else {
		d["status"], d["summary"], d["manifest"] = run.Status, run.Summary, run.Manifest
	}
	writeJSON(w, d)
}

// Change is one recipe field that differs between two runs; A or B is
// absent where that run's recipe lacks the field.
type Change struct {
	Key string  `json:"key"`
	A   *string `json:"a"`
	B   *string `json:"b"`
}

func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	a, b := r.URL.Query().Get("a"), r.URL.Query().Get("b")
	var trees [2]map[string]any
	for i, name := range []string{a, b} {
		if _, _, ok, _ := s.open(name); !ok {
			http.NotFound(w, r)
			return
		}
		t, err := s.recipe(name)
		if err != nil {
			http.Error(w, fmt.Sprintf("run %s: %v", name, errors.Unwrap(err)), http.StatusUnprocessableEntity)
			return
		}
		trees[i] = t
	}
	writeJSON(w, map[string]any{"a": a, "b": b, "changes": DiffRecipes(trees[0], trees[1])})
}

// DiffRecipes lists the fields whose values differ between two recipe
// trees, by dotted key in order; a list is one value.
func DiffRecipes(a, b map[string]any) []Change {
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", a, fa)
	flatten("", b, fb)
	keys := map[string]bool{}
	for k := range fa {
		keys[k] = true
	}
	for k := range fb {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	changes := []Change{}
	for _, k := range sorted {
		va, oka := fa[k]
		vb, okb := fb[k]
		if oka && okb && va == vb {
			continue
		}
		c := Change{Key: k}
		if oka {
			c.A = &va
		}
		if okb {
			c.B = &vb
		}
		changes = append(changes, c)
	}
	return changes
}

func flatten(prefix string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, x := range m {
			flatten(prefix+k+".", x, out)
		}
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprint(v))
	}
	out[strings.TrimSuffix(prefix, ".")] = string(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
