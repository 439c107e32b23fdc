package peft_test

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/safetensors"
)

// Adapter files as PEFT writes them, built here rather than by PEFT (which
// is not installed): the key layout follows get_peft_model_state_dict
// (utils/save_and_load.py at 5d602fdb): "base_model.model." + module path
// + ".lora_A.weight" / ".lora_B.weight", modules_to_save as
// "base_model.model." + module path + ".weight" (the wrapper's
// adapter_state_dict drops "modules_to_save.<adapter>."), and with
// transformers' save_peft_format=False the same keys without the prefix.

// peftFile is an adapter directory's content.
type peftFile struct {
	config  map[string]any
	tensors []safetensors.Tensor
}

func (f peftFile) write(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.MarshalIndent(f.config, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, peft.ConfigFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, peft.WeightsFile), f.tensors, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// loraPair returns random A [r, in] and B [out, r] tensors for path under
// prefix ("base_model.model." or "").
func loraPair(rng *rand.Rand, prefix, path string, r, out, in int) (a, b safetensors.Tensor) {
	fill := func(n int) []float32 {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * 0.3)
		}
		return d
	}
	return safetensors.Tensor{Name: prefix + path + ".lora_A.weight", Shape: []int{r, in}, Data: fill(r * in), Dtype: amp.FP32},
		safetensors.Tensor{Name: prefix + path + ".lora_B.weight", Shape: []int{out, r}, Data: fill(out * r), Dtype: amp.FP32}
}

// qAdapter is a tiny model, a random stream seeded with seed, and a random
// rank-2 LoRA pair for the model's layer-0 q_proj, under PEFT's prefix.
func qAdapter(t *testing.T, seed uint64) (m *model.Model, rng *rand.Rand, q string, a, b safetensors.Tensor) {
	m = tinyModel(t)
	rng = rand.New(rand.NewPCG(seed, seed+1))
	q = "model.layers.0.self_attn.q_proj"
	out, in := moduleShape(m, q)
	a, b = loraPair(rng, "base_model.model.", q, 2, out, in)
	return m, rng, q, a, b
}

// moduleShape is the [out, in] of an HF module path of m.
func moduleShape(m *model.Model, path string) (int, int) {
	s := m.Weights[path+".weight"].Shape
	return s[0], s[1]
}

// mergedRef is W − trunc + s·B·A in float64, the weight PEFT's merge
// computes (trunc nil: plain LoRA).
func mergedRef(w, trunc []float64, a, b []float32, out, in, r int, s float64) []float64 {
	ref := make([]float64, out*in)
	for o := 0; o < out; o++ {
		for j := 0; j < in; j++ {
			var ba float64
			for k := 0; k < r; k++ {
				ba += float64(b[o*r+k]) * float64(a[k*in+j])
			}
			ref[o*in+j] = w[o*in+j] + s*ba
			if trunc != nil {
				ref[o*in+j] -= trunc[o*in+j]
			}
		}
	}
	return ref
}

func float64s(v []float32) []float64 {
	d := make([]float64, len(v))
	for i, x := range v {
		d[i] = float64(x)
	}
	return d
}

// checkClose compares got with ref within tol[i] (or one fp32 rounding of
// ref, 2⁻²⁴·|ref|, the bound of a float64 merge rounded once, when tol
// is nil).
func checkClose(t *testing.T, what string, got []float32, ref, tol []float64) {
	t.Helper()
	for i := range ref {
		bound := 0x1p-24 * math.Abs(ref[i]) * (1 + 1e-9)
		if tol != nil {
			bound = tol[i]
		}
		if e := math.Abs(float64(got[i]) - ref[i]); e > bound {
			t.Fatalf("%s[%d] = %v, float64 reference %v: error %.3g > bound %.3g", what, i, got[i], ref[i], e, bound)
		}
	}
}

// TestLoadPEFTPatterns: exclude_modules, rank_pattern and alpha_pattern
// with PEFT's matching rules, a target_modules list naming a module the
// model lacks (PEFT accepts it when something matches), and keys without
// the base_model.model. prefix: each adapted module merges to
// W + (α_m/r_m)·B·A computed in float64. Before, each of these was
// refused (rank_pattern "not supported yet", c_attn "matches no linear
// module", the unprefixed keys "no tensor base_model.model…").
func TestLoadPEFTPatterns(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewPCG(1, 2))
	// module → (r, alpha) as PEFT resolves them: get_pattern_key takes the
	// first key whose regex matches a dotted suffix of the path
	want := map[string][2]float64{
		"model.layers.0.self_attn.q_proj": {2, 4},
		"model.layers.0.self_attn.v_proj": {1, 4}, // rank_pattern "v_proj"
		"model.layers.0.self_attn.o_proj": {2, 5}, // alpha_pattern "o_proj"
		"model.layers.1.self_attn.q_proj": {3, 4}, // rank_pattern "layers\.1\.self_attn\.q_proj"
		"model.layers.1.self_attn.v_proj": {1, 4},
		// model.layers.1.self_attn.o_proj: exclude_modules
	}
	var ts []safetensors.Tensor
	for _, path := range slices.Sorted(func(yield func(string) bool) {
		for p := range want {
			if !yield(p) {
				return
			}
		}
	}) {
		out, in := moduleShape(m, path)
		a, b := loraPair(rng, "", path, int(want[path][0]), out, in)
		ts = append(ts, a, b)
	}
	dir := peftFile{config: map[string]any{
		"peft_type": "LORA", "r": 2, "lora_alpha": 4, "task_type": "CAUSAL_LM", "bias": "none",
		"target_modules":    []string{"q_proj", "v_proj", "o_proj", "c_attn"},
		"exclude_modules":   []string{"model.layers.1.self_attn.o_proj"},
		"rank_pattern":      map[string]int{`layers\.1\.self_attn\.q_proj`: 3, "v_proj": 1},
		"alpha_pattern":     map[string]float64{"o_proj": 5},
		"init_lora_weights": true, "use_rslora": false, "use_dora": false, "layers_pattern": nil,
		"megatron_config": nil, "megatron_core": "megatron.core", "loftq_config": map[string]any{},
		"runtime_config": map[string]any{"ephemeral_gpu_offload": false}, "lora_bias": false,
		"trainable_token_indices": nil, "alora_invocation_tokens": nil, "peft_version": "0.18.0",
	}, tensors: ts}.write(t)

	orig := map[string][]float64{}
	for p := range want {
		orig[p] = float64s(m.Weights[p+".weight"].Float32())
	}
	l, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Modules) != len(want) {
		t.Fatalf("%d modules adapted, want %d", len(l.Modules), len(want))
	}
	merged, err := peft.MergedWeights(m, l)
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, peft.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	for p, ra := range want {
		mod := l.Module(p)
		if mod.R != int(ra[0]) || mod.Scaling != ra[1]/ra[0] {
			t.Errorf("%s: r %d scaling %g, want r %g scaling %g", p, mod.R, mod.Scaling, ra[0], ra[1]/ra[0])
		}
		a, _, _ := f.Float32(p + ".lora_A.weight")
		b, _, _ := f.Float32(p + ".lora_B.weight")
		out, in := moduleShape(m, p)
		checkClose(t, p, merged[p+".weight"], mergedRef(orig[p], nil, a, b, out, in, int(ra[0]), ra[1]/ra[0]), nil)
	}

	// saved back, the patterns and the exclusion survive and load the same
	out := t.TempDir()
	if err := l.Save(out, "base"); err != nil {
		t.Fatal(err)
	}
	l2, err := peft.Load(out, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range l.Modules {
		if m2 := l2.Module(mod.Path); m2 == nil || m2.R != mod.R || m2.Scaling != mod.Scaling || !slices.Equal(m2.A, mod.A) {
			t.Errorf("%s does not round-trip through Save", mod.Path)
		}
	}
}

// TestLoadAllLinearAnyCase: PEFT lowercases target_modules "ALL-LINEAR"
// (_maybe_include_all_linear_layers); before, it was a regex matching
// nothing.
func TestLoadAllLinearAnyCase(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var ts []safetensors.Tensor
	for _, tg := range peft.ModelTargets(m) {
		a, b := loraPair(rng, "base_model.model.", tg.Path, 2, tg.Out, tg.In)
		ts = append(ts, a, b)
	}
	dir := peftFile{config: map[string]any{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": "ALL-LINEAR"}, tensors: ts}.write(t)
	l, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Modules) != len(peft.ModelTargets(m)) {
		t.Fatalf("%d modules adapted, want all %d", len(l.Modules), len(peft.ModelTargets(m)))
	}
}

// TestLoadModulesToSave: modules_to_save lm_head and embed_tokens replace
// the base's weights with the file's, exactly (fp32 base), and the LoRA
// modules merge as usual; on a model with tied embeddings it is refused.
// Before, modules_to_save was refused.
func TestLoadModulesToSave(t *testing.T) {
	m, rng, q, a, b := qAdapter(t, 5)
	out, in := moduleShape(m, q)
	head, emb := m.Weights["lm_head.weight"], m.Weights["model.embed_tokens.weight"]
	newHead, newEmb := make([]float32, len(head.Data)), make([]float32, len(emb.Data))
	for i := range newHead {
		newHead[i] = float32(rng.NormFloat64())
	}
	for i := range newEmb {
		newEmb[i] = float32(rng.NormFloat64())
	}
	file := peftFile{config: map[string]any{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": []string{"q_proj"}, "layers_to_transform": 0,
		"modules_to_save": []string{"lm_head", "embed_tokens"}},
		tensors: []safetensors.Tensor{a, b,
			{Name: "base_model.model.lm_head.weight", Shape: head.Shape, Data: newHead, Dtype: amp.FP32},
			{Name: "base_model.model.model.embed_tokens.weight", Shape: emb.Shape, Data: newEmb, Dtype: amp.FP32}}}
	dir := file.write(t)
	wq := float64s(m.Weights[q+".weight"].Data)
	l, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if err := peft.MergeInto(m, l, amp.FP32); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Weights["lm_head.weight"].Data, newHead) || !slices.Equal(m.Weights["model.embed_tokens.weight"].Data, newEmb) {
		t.Fatal("the saved lm_head and embed_tokens did not replace the base's")
	}
	checkClose(t, q, m.Weights[q+".weight"].Data, mergedRef(wq, nil, a.Data, b.Data, out, in, 2, 2), nil)

	tied := tinyModel(t)
	tied.Config.TieWordEmbeddings = true
	if _, err := peft.Load(dir, peft.BaseOf(tied)); err == nil || !strings.Contains(err.Error(), "tie_word_embeddings") {
		t.Fatalf("a tied model: %v, want a refusal naming tie_word_embeddings", err)
	}
	// an adapter loaded with modules_to_save is not saved without them
	if err := l.Save(t.TempDir(), "base"); err == nil || !strings.Contains(err.Error(), "modules_to_save") {
		t.Fatalf("Save: %v, want a refusal naming modules_to_save", err)
	}
}

// loadMerged loads the adapter in dir onto m and merges it.
func loadMerged(t *testing.T, dir string, m *model.Model) (*peft.Adapter, map[string][]float32) {
	t.Helper()
	l, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := peft.MergedWeights(m, l)
	if err != nil {
		t.Fatal(err)
	}
	return l, merged
}

// truncSVD is the best rank-r approximation U_r·S_r·V_rᵀ of w [out, in],
// from the eigenvectors of wᵀw (not the SVD routine peft uses):
// w·V_r·V_rᵀ.
func truncSVD(w []float64, out, in, r int) []float64 {
	wm := mat.NewDense(out, in, w)
	var g mat.SymDense
	g.SymOuterK(1, wm.T())
	var eig mat.EigenSym
	if !eig.Factorize(&g, true) {
		panic("eigen decomposition failed")
	}
	var v mat.Dense
	eig.VectorsTo(&v) // ascending eigenvalues: the top r are the last columns
	vr := v.Slice(0, in, in-r, in)
	var p, res mat.Dense
	p.Mul(vr, vr.T())
	res.Mul(wm, &p)
	return res.RawMatrix().Data
}

// projFirstColumns is Q_r·Q_rᵀ·w for Q_r an orthonormal basis of w's first
// r columns, by modified Gram–Schmidt in float64 (not the QR routine peft
// uses): OLoRA's s·B₀·A₀, whatever signs a QR picks.
func projFirstColumns(w []float64, out, in, r int) []float64 {
	q := make([][]float64, r)
	for k := 0; k < r; k++ {
		col := make([]float64, out)
		for o := range col {
			col[o] = w[o*in+k]
		}
		for _, prev := range q[:k] {
			var dot float64
			for o := range col {
				dot += prev[o] * col[o]
			}
			for o := range col {
				col[o] -= dot * prev[o]
			}
		}
		var n float64
		for _, x := range col {
			n += x * x
		}
		for o := range col {
			col[o] /= math.Sqrt(n)
		}
		q[k] = col
	}
	res := make([]float64, out*in)
	for j := 0; j < in; j++ {
		for _, qk := range q {
			var dot float64
			for o := 0; o < out; o++ {
				dot += qk[o] * w[o*in+j]
			}
			for o := 0; o < out; o++ {
				res[o*in+j] += qk[o] * dot
			}
		}
	}
	return res
}

// TestLoadUnconvertedResidualAdapters: an adapter saved with
// init_lora_weights pissa or olora and not converted holds A and B trained
// against W − s·B₀·A₀; PEFT re-runs the initialization on the base it
// loads onto, so the merge is W − s·B₀·A₀ + s·B·A. s·B₀·A₀ is the rank-r
// truncated SVD of W for PiSSA and s times the projection onto W's first
// r columns for OLoRA, computed here by other algorithms in float64.
// Before, both merged W + s·B·A, silently.
//
// Bound: peft rounds A₀ and B₀ to fp32 before forming the residual, and
// rounds the residual and the merge to fp32: per entry at most
// 2⁻²³·s·Σ_k|B₀||A₀| (the factors' roundings, through a product whose
// terms are bounded by that sum) plus 2⁻²⁴ each for the residual and the
// merge. Σ_k|B₀||A₀| ≤ √(Σ_k B₀²)·√(Σ_k A₀²) ≤ ‖W‖_F/s for PiSSA and
// ‖W‖_F for OLoRA, so 4·2⁻²⁴·(max(1, s)·‖W‖_F + |W_ij| + |ref_ij|)
// bounds the error.
func TestLoadUnconvertedResidualAdapters(t *testing.T) {
	for _, tc := range []struct {
		init  string
		trunc func(w []float64, out, in, r int) []float64
		// scaled: OLoRA's B₀·A₀ is the projection itself, so s·B₀·A₀ is
		// s times it; PiSSA divides s into its factors
		scaled bool
	}{{"pissa", truncSVD, false}, {"olora", projFirstColumns, true}} {
		t.Run(tc.init, func(t *testing.T) {
			m := tinyModel(t)
			rng := rand.New(rand.NewPCG(7, 8))
			paths := []string{"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"}
			r, alpha := 2, 3.0
			s := alpha / float64(r)
			var ts []safetensors.Tensor
			for _, p := range paths {
				out, in := moduleShape(m, p)
				a, b := loraPair(rng, "base_model.model.", p, r, out, in)
				ts = append(ts, a, b)
			}
			dir := peftFile{config: map[string]any{"peft_type": "LORA", "r": r, "lora_alpha": alpha,
				"target_modules": paths, "layers_to_transform": nil, "init_lora_weights": tc.init}, tensors: ts}.write(t)
			orig := map[string][]float64{}
			for _, p := range paths {
				orig[p] = float64s(m.Weights[p+".weight"].Data)
			}
			l, merged := loadMerged(t, dir, m)
			tols := map[string][]float64{}
			for i, p := range paths {
				out, in := moduleShape(m, p)
				trunc := tc.trunc(orig[p], out, in, r)
				if tc.scaled {
					for j := range trunc {
						trunc[j] *= s
					}
				}
				ref := mergedRef(orig[p], trunc, ts[2*i].Data, ts[2*i+1].Data, out, in, r, s)
				var fro float64
				for _, x := range orig[p] {
					fro += x * x
				}
				tol := make([]float64, len(ref))
				for j := range tol {
					tol[j] = 4 * 0x1p-24 * (max(1, s)*math.Sqrt(fro) + math.Abs(orig[p][j]) + math.Abs(ref[j]))
				}
				checkClose(t, p, merged[p+".weight"], ref, tol)
				tols[p] = tol
			}
			// saved again, it is a converted LoRA of the original model,
			// which merges onto the original W to the same weights within
			// the same bound
			out := t.TempDir()
			if err := l.Save(out, "base"); err != nil {
				t.Fatal(err)
			}
			_, merged2 := loadMerged(t, out, tinyModel(t))
			for _, p := range paths {
				checkClose(t, p+" (converted)", merged2[p+".weight"], float64s(merged[p+".weight"]), tols[p])
			}
		})
	}
}

// TestLoadRefusesByName: every adapter_config.json field or tensor whose
// effect mixtune does not apply is an error naming it (and its value),
// never a silent merge. Before, pissa_niter_*, corda, loftq, lora_ga and
// aLoRA adapters merged onto the original weights with exit 0, and the
// unknown fields were ignored.
func TestLoadRefusesByName(t *testing.T) {
	m, _, q, a, b := qAdapter(t, 9)
	out, _ := moduleShape(m, q)
	plain := []safetensors.Tensor{a, b}
	for _, tc := range []struct {
		name    string
		extra   map[string]any
		tensors []safetensors.Tensor
		want    string
	}{
		{"pissa_niter", map[string]any{"init_lora_weights": "pissa_niter_4"}, nil, `init_lora_weights "pissa_niter_4": this PiSSA adapter subtracts a randomized SVD`},
		{"corda", map[string]any{"init_lora_weights": "corda"}, nil, `init_lora_weights "corda": CorDA's residual base`},
		{"loftq", map[string]any{"init_lora_weights": "loftq", "loftq_config": map[string]any{"loftq_bits": 4}}, nil, `init_lora_weights "loftq": LoftQ's base is a quantized model`},
		{"lora_ga", map[string]any{"init_lora_weights": "lora_ga"}, nil, `init_lora_weights "lora_ga": LoRA-GA's residual base`},
		{"unknown init", map[string]any{"init_lora_weights": "mica"}, nil, `init_lora_weights "mica": not an initialization`},
		{"aLoRA", map[string]any{"alora_invocation_tokens": []int{5, 6}}, nil, `alora_invocation_tokens [5,6]: aLoRA adapters`},
		{"bias all", map[string]any{"bias": "all"}, nil, `bias "all": trained biases are not supported`},
		{"lora_bias", map[string]any{"lora_bias": true}, nil, `lora_bias true: trained lora_B biases`},
		{"bias tensor", nil, []safetensors.Tensor{{Name: "base_model.model." + q + ".lora_B.bias", Shape: []int{out}, Data: make([]float32, out), Dtype: amp.FP32}},
			`tensor base_model.model.` + q + `.lora_B.bias is a trained bias`},
		{"qalora", map[string]any{"use_qalora": true}, nil, `use_qalora true: QALoRA is not supported`},
		{"trainable tokens", map[string]any{"trainable_token_indices": []int{1}}, nil, `trainable_token_indices [1]: trainable token embeddings`},
		{"target_parameters", map[string]any{"target_parameters": []string{"experts.w1"}}, nil, `target_parameters ["experts.w1"]`},
		{"unknown field", map[string]any{"lora_future_thing": 3}, nil, `lora_future_thing 3: mixtune does not know this field`},
		{"modules_to_save other", map[string]any{"modules_to_save": []string{"norm"}}, nil, `modules_to_save ["norm"]: module "norm": mixtune replaces only lm_head and embed_tokens`},
		{"saved tensor not named", nil, []safetensors.Tensor{{Name: "base_model.model.lm_head.weight", Shape: m.Weights["lm_head.weight"].Shape, Data: make([]float32, len(m.Weights["lm_head.weight"].Data)), Dtype: amp.FP32}},
			`tensor base_model.model.lm_head.weight replaces a base weight, but modules_to_save does not name lm_head`},
		{"layers_pattern", map[string]any{"layers_pattern": "h", "layers_to_transform": []int{0}}, nil, `layers_pattern "h": only "layers"`},
		{"fan_in_fan_out", map[string]any{"fan_in_fan_out": true}, nil, `fan_in_fan_out true: fan_in_fan_out adapters`},
		{"exclude everything", map[string]any{"exclude_modules": ".*"}, nil, `select no linear module of the model once exclude_modules is applied`},
		{"Go-only regex", map[string]any{"target_modules": `.*[[:alpha:]]_proj`}, nil, `the POSIX class [:alpha:]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]any{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": []string{q}}
			for k, v := range tc.extra {
				cfg[k] = v
			}
			before := slices.Clone(m.Weights[q+".weight"].Data)
			dir := peftFile{config: cfg, tensors: append(slices.Clone(plain), tc.tensors...)}.write(t)
			_, err := peft.Load(dir, peft.BaseOf(m))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v\nwant an error containing %q", err, tc.want)
			}
			if !slices.Equal(before, m.Weights[q+".weight"].Data) {
				t.Fatal("a refused adapter changed the base weight")
			}
		})
	}
}
