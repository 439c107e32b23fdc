package train

import (
	"fmt"
	"sort"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// TestLoRAProductsOnTensorCores lists, for a LoRA step of a llama with
// 16-bit frozen weights under each 16-bit policy, which matrix products
// have both operands in the policy's format (nn.LinearAttrs.Operands: the
// Vulkan engine runs those on that format's tensor cores where the device
// has them), and requires it of every projection's forward product, its
// dx, the adapters' products and dW, and the fused head's logits and dx:
// every GEMM of a LoRA step.
func TestLoRAProductsOnTensorCores(t *testing.T) {
	for _, low := range []amp.Format{amp.BF16, amp.FP16} {
		m, err := model.NewAs(model.Config{VocabSize: 259, HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2,
			NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
			InitializerRange: 0.2, BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}, 3, low)
		if err != nil {
			t.Fatal(err)
		}
		c := peft.Config{R: 4, Alpha: 8, TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}
		ts, _ := peft.Select(peft.ModelTargets(m), c)
		l, err := peft.New(c, ts, 1, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		policy := amp.DefaultPolicy(low)
		ru, err := newRunner(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, m, l, 2, 8, trainables(m, l), &policy)
		if err != nil {
			t.Fatal(err)
		}
		on, off := map[string]int{}, map[string]int{}
		for _, n := range ru.g.B.G.AllNodes() {
			if n.Op() == nil {
				continue
			}
			spec, err := nn.Spec(n)
			if err != nil {
				continue // not an nn op
			}
			switch a := spec.Attrs.(type) {
			case nn.LinearAttrs:
				key := fmt.Sprintf("%s %d×%d", spec.Kind, a.Out, a.In)
				if a.Operands[0] == low && a.Operands[1] == low {
					on[key]++
				} else {
					off[key+fmt.Sprintf(" %v", a.Operands)]++
				}
			case nn.HeadLossAttrs:
				if spec.Kind != "lm_head_loss" {
					continue
				}
				// its products, as the Vulkan engine's lowering pairs
				// them: logits = x·Wᵀ, dx = dlogits·W (dlogits in
				// LogitsFormat); W is frozen here, so no dW
				fw := spec.In[1]
				if a.W16 {
					fw = a.W16Format
				}
				for _, p := range []struct {
					name   string
					fa, fb amp.Format
				}{{"logits", spec.In[0], fw}, {"dx", a.LogitsFormat, fw}} {
					key := fmt.Sprintf("lm_head_loss %s %d×%d", p.name, a.V, a.D)
					if p.fa == low && p.fb == low {
						on[key]++
					} else {
						off[key+fmt.Sprintf(" [%v %v]", p.fa, p.fb)]++
					}
				}
			}
		}
		ru.close()
		t.Logf("%s: products with %s operands (tensor cores): %s", low, low, list(on))
		t.Logf("%s: other products (fp32 kernel): %s", low, list(off))
		for k := range off {
			t.Errorf("%s: %s does not run on %s tensor cores", low, k, low)
		}
		if len(on) == 0 {
			t.Errorf("%s: no product on tensor cores", low)
		}
	}
}

func list(m map[string]int) string {
	var ks []string
	for k, n := range m {
		ks = append(ks, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(ks)
	return fmt.Sprint(ks)
}
