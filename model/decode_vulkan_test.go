package model_test

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/gpu/vkengine"
	"github.com/mixtune/mixtune/gpu/vulkan/vulkantest"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// TestDecodingOnVulkan decodes every family fixture on the Vulkan engine
// (vkengine.Decoding: weights, values and the key/value cache on the
// device), each row's prompt whole, token by token, and 3 tokens then one
// at a time, with no adapter, LoRA and DoRA (unmerged), under the fp32
// and the bf16 policy. The reference is the float64 forward with the same
// adapter (TestFamiliesMatchPyTorch holds it to PyTorch's float64), and
// the standard the CPU engine's decoding sets on the same case: the
// largest logit error, of the largest logit, within twice the native
// backend's decoding's (at least 5e-7 in fp32, 2^-9 in bf16, where one
// rounding landing an ulp away is a correct result too). The summation
// orders differ between the engines, so the standard is the accuracy
// any correct implementation has, not the CPU's bits. With DoRA the CPU
// sums each row's norm in float64; an fp32 sum (the device's) is off by
// up to γ_{in+2r+1} of the norm (lower_dora.go), which scales the row's
// output: doraNormFloor allows that once a layer.
func TestDecodingOnVulkan(t *testing.T) {
	eng := vulkanEngine(t)
	ents, err := os.ReadDir(familiesDir)
	if err != nil {
		t.Fatal(err)
	}
	bf16 := amp.DefaultPolicy(amp.BF16)
	native := blas.Native{Workers: 2}
	for _, ent := range ents {
		m, e := loadFamily(t, filepath.Join(familiesDir, ent.Name()))
		for _, kind := range []string{"none", "lora", "dora"} {
			var l *peft.Adapter
			if kind != "none" {
				l, _ = e.adapterFrom(t, m, kind)
			}
			var exact []float64
			for row := 0; row < e.batch; row++ {
				exact = append(exact, forwardLogits(t, native, m, l, tensor.Float64, nil, e.ids[row*e.seq:(row+1)*e.seq])...)
			}
			for _, policy := range []*amp.Policy{nil, &bf16} {
				name, floor := ent.Name()+"/"+kind+"/fp32", 5e-7
				if kind == "dora" {
					floor = max(floor, doraNormFloor(m, e.r))
				}
				if policy != nil {
					name, floor = ent.Name()+"/"+kind+"/bf16", max(floor, 1.0/512)
				}
				t.Run(name, func(t *testing.T) {
					cfg := model.DecodeConfig{Policy: policy}
					if l != nil {
						cfg.Linear = l.Linear(map[string]*G.Node{})
					}
					cpu := model.NewDecoderWith(m, &nn.Engine{BLAS: native, Workers: 2}, cfg)
					dec := vkengine.NewDecoding(eng, nil)
					defer dec.Close()
					cfg.Device = func(logits *G.Node, b *nn.Builder, c *nn.KVCache) (model.DecodeProgram, error) {
						return dec.Compile(logits, b, c)
					}
					gpu := model.NewDecoderWith(m, &nn.Engine{BLAS: native, Workers: 2}, cfg)
					defer gpu.Close()
					for _, prefill := range []int{e.seq, 1, 3} {
						var got, want []float64
						for row := 0; row < e.batch; row++ {
							ids := e.ids[row*e.seq : (row+1)*e.seq]
							for _, d := range []*model.Decoder{gpu, cpu} {
								lg, err := d.Logits(ids, prefill)
								if err != nil {
									t.Fatal(err)
								}
								for _, x := range lg {
									if d == gpu {
										got = append(got, f64s(x)...)
									} else {
										want = append(want, f64s(x)...)
									}
								}
							}
						}
						bound := 2 * max(relErr(want, exact), floor)
						if r := relErr(got, exact); !(r <= bound) {
							t.Errorf("prefill %d: largest logit error %.3g of the largest logit, bound %.3g (the CPU's %.3g)", prefill, r, bound, relErr(want, exact))
						} else if prefill == 1 {
							t.Logf("token by token: largest logit error %.2g (the CPU's %.2g), bound %.2g", r, relErr(want, exact), bound)
						}
					}
				})
			}
		}
	}
}

// doraNormFloor is γ_n·layers for n = the widest module's in-features +
// 2r + 1: an fp32 DoRA norm's relative error bound, once a layer.
func doraNormFloor(m *model.Model, r int) float64 {
	c := m.Config
	n := float64(max(c.HiddenSize, c.IntermediateSize) + 2*r + 1)
	u := 0x1p-24
	return n * u / (1 - n*u) * float64(c.NumHiddenLayers)
}

// TestGenerateOnVulkan generates greedily from the shipped tiny model for
// prompts of different lengths at once (the prompts in one run, then one
// token of each live sequence a run, sequences finishing at their own
// stop or at the context's end), on the Vulkan engine and on the CPU:
// the same tokens. Where they part, the CPU's logits at that point must
// be a near tie, the two tokens' logits within the fp32 decoding bound
// of TestDecodingOnVulkan (2·5e-7 of the largest logit, twice over for
// the two engines): both are then correct greedy choices, and the test
// says so instead of failing.
func TestGenerateOnVulkan(t *testing.T) {
	eng := vulkanEngine(t)
	m, err := model.Load(filepath.Join("..", "models", "tiny-byte"))
	if err != nil {
		t.Fatal(err)
	}
	bos := m.Config.BOSTokenID
	var prompts [][]int
	for _, p := range []string{"Date: 2033-03-19\nIn words:", "The", "Date: 1983-08-28", strings.Repeat("On the 7th of March, ", 5)} {
		ids := []int{bos}
		for _, c := range []byte(p) {
			ids = append(ids, int(c))
		}
		prompts = append(prompts, ids)
	}
	native := blas.Native{Workers: 2}
	cpu := model.NewDecoderWith(m, &nn.Engine{BLAS: native, Workers: 2}, model.DecodeConfig{})
	dec := vkengine.NewDecoding(eng, nil)
	defer dec.Close()
	gpu := model.NewDecoderWith(m, &nn.Engine{BLAS: native, Workers: 2}, model.DecodeConfig{Device: func(logits *G.Node, b *nn.Builder, c *nn.KVCache) (model.DecodeProgram, error) {
		return dec.Compile(logits, b, c)
	}})
	defer gpu.Close()
	const maxNew = 40 // the last prompt reaches the context (128) first
	want, err := cpu.Generate(prompts, maxNew, model.Sampling{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := gpu.Generate(prompts, maxNew, model.Sampling{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		j := 0
		for j < len(got[i]) && j < len(want[i]) && got[i][j] == want[i][j] {
			j++
		}
		if j == len(got[i]) && j == len(want[i]) {
			t.Logf("prompt %d: %d tokens, the same: %q", i, j, bytesOf(want[i]))
			continue
		}
		if j == len(got[i]) || j == len(want[i]) {
			t.Errorf("prompt %d: %d tokens on the device, %d on the CPU, the same as far as both go", i, len(got[i]), len(want[i]))
			continue
		}
		lg, err := cpu.Logits(append(slices.Clone(prompts[i]), want[i][:j]...), len(prompts[i])+j)
		if err != nil {
			t.Fatal(err)
		}
		last := lg[len(lg)-1]
		top := 0.0
		for _, x := range last {
			top = max(top, math.Abs(float64(x)))
		}
		gap := float64(last[want[i][j]] - last[got[i][j]])
		if bound := 4 * 5e-7 * top; gap > bound {
			t.Errorf("prompt %d: token %d is %d on the device, %d on the CPU, whose logits differ by %.3g (bound for a tie %.3g)", i, j, got[i][j], want[i][j], gap, bound)
		} else {
			t.Logf("prompt %d: the engines part at token %d on a near tie (logits %.3g apart)", i, j, gap)
		}
	}
}

// bytesOf is a byte-level model's tokens as text.
func bytesOf(ids []int) string {
	b := make([]byte, 0, len(ids))
	for _, id := range ids {
		b = append(b, byte(id))
	}
	return string(b)
}

// vulkanEngine opens the Vulkan engine on the test device (vulkantest),
// closed when the test ends, or skips naming what is missing.
func vulkanEngine(t *testing.T) *vkengine.Engine {
	t.Helper()
	_, dev := vulkantest.Open(t)
	eng, err := vkengine.New(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	return eng
}
