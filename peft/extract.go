package peft

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
)

// ExtractReport is how well a rank-r adapter captures one module's change.
type ExtractReport struct {
	Path      string
	DeltaNorm float64 // ‖W_tuned − W_base‖_F
	// RelError is ‖ΔW − B·A‖_F / ‖ΔW‖_F with A and B as stored (after the
	// cast to the output dtype); 0 when the module did not change.
	RelError float64
}

// Extract factors each target module's change ΔW = W_tuned − W_base into a
// rank-r LoRA, as mergekit-extract-lora does: with the truncated SVD
// ΔW ≈ U_r·diag(S_r)·V_rᵀ, A = diag(√S_r)·V_rᵀ and B = U_r·diag(√S_r),
// with r = alpha = rank so the scaling is 1. The difference and the SVD are
// computed in float64 whatever the checkpoints' dtype (their weights hold
// bf16/fp16 values exactly in fp32), and A and B are rounded to dtype,
// the format they will be saved in. base and tuned hold the weights by HF
// name.
func Extract(targets []Target, base, tuned map[string]*model.Tensor, rank int, dtype amp.Format) (*Adapter, []ExtractReport, error) {
	var shorts []string
	for _, t := range targets {
		if k := min(t.Out, t.In); rank > k {
			return nil, nil, fmt.Errorf("rank %d exceeds min(out, in) = %d of %s", rank, k, t.Path)
		}
		if s := t.Path[strings.LastIndex(t.Path, ".")+1:]; !slices.Contains(shorts, s) {
			shorts = append(shorts, s)
		}
	}
	c := Config{R: rank, Alpha: float64(rank), TargetModules: shorts}
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	l := alloc(c, targets)
	reports := make([]ExtractReport, len(l.Modules))
	for i, m := range l.Modules {
		name := m.Path + ".weight"
		wb, wt := base[name], tuned[name]
		if wb == nil || wt == nil {
			return nil, nil, fmt.Errorf("%s: missing from the base or the tuned model", name)
		}
		if len(wb.Float32()) != m.Out*m.In || len(wt.Float32()) != m.Out*m.In {
			return nil, nil, fmt.Errorf("%s: base %v and tuned %v shapes differ from [%d %d]", name, wb.Shape, wt.Shape, m.Out, m.In)
		}
		rep, err := extractModule(m, wb.Float32(), wt.Float32(), rank, dtype)
		if err != nil {
			return nil, nil, err
		}
		reports[i] = rep
	}
	return l, reports, nil
}

func extractModule(m *Module, base, tuned []float32, r int, dtype amp.Format) (ExtractReport, error) {
	d := make([]float64, len(base))
	var norm2 float64
	for i := range d {
		d[i] = float64(tuned[i]) - float64(base[i])
		norm2 += d[i] * d[i]
	}
	rep := ExtractReport{Path: m.Path, DeltaNorm: math.Sqrt(norm2)}
	if norm2 == 0 {
		return rep, nil // unchanged: A = B = 0
	}
	u, s, v, err := svd(d, m.Out, m.In)
	if err != nil {
		return rep, fmt.Errorf("%s: %w", m.Path, err)
	}
	k := len(s)
	for i := 0; i < r; i++ {
		root := math.Sqrt(s[i])
		for j := 0; j < m.In; j++ {
			m.A[i*m.In+j] = dtype.Round(float32(root * v[j*k+i]))
		}
		for o := 0; o < m.Out; o++ {
			m.B[o*r+i] = dtype.Round(float32(u[o*k+i] * root))
		}
	}
	ba := lowRank(m.B, m.A, m.Out, m.In, r, 1)
	var e2 float64
	for i := range d {
		e := d[i] - ba[i]
		e2 += e * e
	}
	rep.RelError = math.Sqrt(e2 / norm2)
	return rep, nil
}

// SameArchitecture checks that two models have the same weights and shapes.
func SameArchitecture(a, b *model.Model) error {
	sa, sb := model.Specs(a.Config), model.Specs(b.Config)
	if len(sa) != len(sb) {
		return fmt.Errorf("the tuned model has %d weights, the base %d: not the same architecture", len(sb), len(sa))
	}
	for i := range sa {
		if sa[i].Name != sb[i].Name || !slices.Equal(sa[i].Shape, sb[i].Shape) {
			return fmt.Errorf("the tuned model's %s %v differs from the base's %s %v: not the same architecture", sb[i].Name, sb[i].Shape, sa[i].Name, sa[i].Shape)
		}
	}
	return nil
}

// UntouchedChanges names the weights that changed but are not in the
// adapter (embeddings, norms, the LM head, untargeted modules): the
// adapter cannot carry those changes.
func UntouchedChanges(base, tuned *model.Model, targets []Target) []string {
	in := map[string]bool{}
	for _, t := range targets {
		in[t.Path+".weight"] = true
	}
	var notes []string
	for _, s := range model.Specs(base.Config) {
		if in[s.Name] {
			continue
		}
		a, b := base.Weights[s.Name].Float32(), tuned.Weights[s.Name].Float32()
		var d, n float64
		for i := range a {
			e := float64(b[i]) - float64(a[i])
			d += e * e
			n += float64(a[i]) * float64(a[i])
		}
		if d > 0 {
			notes = append(notes, fmt.Sprintf("%s changed (‖ΔW‖/‖W‖ = %.3g) and is not part of the adapter", s.Name, math.Sqrt(d/math.Max(n, 1e-300))))
		}
	}
	return notes
}
