package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// invFreq64 is transformers' RoPE inverse frequencies in float64, the
// closed form of _compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters and _compute_llama3_parameters
// (modeling_rope_utils.py): θ^(−2i/d), divided by factor for linear, and
// for llama3 kept above the high-frequency wavelength, divided by factor
// below the low-frequency one, and interpolated between.
func invFreq64(d int, theta float64, rs *RopeScaling) []float64 {
	inv := make([]float64, d/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(theta, float64(2*i)/float64(d))
	}
	if rs == nil {
		return inv
	}
	for i, f := range inv {
		switch rs.Type {
		case "linear":
			inv[i] = f / rs.Factor
		case "llama3":
			old := float64(rs.OriginalMaxPositionEmbeddings)
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < old/rs.HighFreqFactor:
			case wavelen > old/rs.LowFreqFactor:
				inv[i] = f / rs.Factor
			default:
				smooth := (old/wavelen - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
				inv[i] = (1-smooth)*f/rs.Factor + smooth*f
			}
		}
	}
	return inv
}

// TestRopeLayouts: the v4 layout (top-level rope_theta, rope_scaling) and
// transformers v5's (rope_parameters holding rope_theta and the scaling)
// give the same theta, scaling and frequencies, which match the float64
// closed form. Before, the v5 llama3 fixture read as theta 10000 with no
// scaling.
//
// Bound: InvFreq computes in fp32 as transformers does. The exponent 2i/d
// is exact in fp32 (d a power of two here); θ^x then has a relative error
// of at most a few ulps, and each of the at most six fp32 operations after
// it adds one rounding (2⁻²⁴ relative), so 16 ulps (16·2⁻²⁴) bounds the
// relative error. The llama3 fixture's wavelengths are kept 10⁻³ away from
// the band edges, so fp32 and float64 put each in the same band.
func TestRopeLayouts(t *testing.T) {
	for _, tc := range []struct {
		v4, v5 string
		theta  float64
		scale  *RopeScaling
	}{
		{"v4_llama3.json", "v5_llama3.json", 500000, &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}},
		{"v4_linear.json", "v5_linear.json", 1e6, &RopeScaling{Type: "linear", Factor: 4}},
		{"", "v5_default.json", 250000, nil},
	} {
		var first []float32
		for _, name := range []string{tc.v4, tc.v5} {
			if name == "" {
				continue
			}
			b, err := os.ReadFile(filepath.Join("testdata", "rope_layouts", name))
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseConfig(b)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if c.RopeTheta != tc.theta || !sameScaling(c.RopeScaling, tc.scale) {
				t.Fatalf("%s: theta %g scaling %+v, want %g %+v", name, c.RopeTheta, c.RopeScaling, tc.theta, tc.scale)
			}
			got := c.InvFreq()
			want := invFreq64(c.HeadDimension(), tc.theta, tc.scale)
			for i := range want {
				if rs := tc.scale; rs != nil && rs.Type == "llama3" {
					w := 2 * math.Pi * math.Pow(tc.theta, float64(2*i)/float64(c.HeadDimension()))
					for _, edge := range []float64{8192 / rs.HighFreqFactor, 8192 / rs.LowFreqFactor} {
						if math.Abs(w/edge-1) < 1e-3 {
							t.Fatalf("%s: wavelength %d (%g) is within 10⁻³ of a band edge %g: pick another fixture", name, i, w, edge)
						}
					}
				}
				if e := math.Abs(float64(got[i])-want[i]) / want[i]; e > 16*0x1p-24 {
					t.Errorf("%s: inv_freq[%d] = %g, float64 %g: relative error %.3g > 16·2⁻²⁴", name, i, got[i], want[i], e)
				}
			}
			if first != nil {
				for i := range got {
					if got[i] != first[i] {
						t.Fatalf("%s: inv_freq[%d] = %g, the v4 layout's %g", name, i, got[i], first[i])
					}
				}
			}
			first = got
		}
	}
}

// TestRopeLayoutRefusals: a RoPE layout or type mixtune does not compute
// is an error naming the field, never a silent default.
func TestRopeLayoutRefusals(t *testing.T) {
	base := `"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":64`
	for _, tc := range []struct{ extra, want string }{
		{`"rope_parameters":{"rope_type":"yarn","factor":4,"rope_theta":10000}`, `rope_parameters of type "yarn" is not supported`},
		{`"rope_parameters":{"rope_type":"dynamic","factor":2}`, `rope_parameters of type "dynamic" is not supported`},
		{`"rope_parameters":{"rope_type":"linear","factor":2,"attention_factor":0.5}`, `rope_parameters.attention_factor is not supported with rope_type linear`},
		{`"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":16,"mscale":2}`, `rope_scaling.mscale is not supported with rope_type llama3`},
		{`"rope_parameters":{"rope_type":"default","rope_theta":10000,"partial_rotary_factor":0.5}`, `rope_parameters.partial_rotary_factor 0.5 is not supported`},
		{`"partial_rotary_factor":0.25`, `partial_rotary_factor 0.25 is not supported`},
		{`"rope_theta":10000,"rope_parameters":{"rope_type":"default","rope_theta":500000}`, `rope_theta 10000 and rope_parameters.rope_theta 500000 disagree`},
		{`"rope_scaling":{"rope_type":"linear","factor":2},"rope_parameters":{"rope_type":"linear","factor":4}`, `rope_scaling {"rope_type":"linear","factor":2} and rope_parameters {"rope_type":"linear","factor":4} disagree`},
		{`"rope_parameters":[1]`, `rope_parameters must be an object or null, got [1]`},
		{`"rope_parameters":{"rope_type":"linear"}`, `rope_parameters of type linear needs factor`},
		{`"rope_theta":"big"`, `rope_theta must be a number, got "big"`},
		{`"layer_types":["full_attention","sliding_attention"],"model_type":"mistral","rope_parameters":{"full_attention":{"rope_type":"default","rope_theta":1},"sliding_attention":{"rope_type":"default","rope_theta":2}}`,
			`rope_parameters differ between layer types (full_attention, sliding_attention)`},
	} {
		_, err := ParseConfig([]byte("{" + base + "," + tc.extra + "}"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant an error containing %q", tc.extra, err, tc.want)
		}
	}
	// accepted: the two layouts agreeing, and a per-layer-type object
	for _, extra := range []string{
		`"rope_theta":500000,"rope_parameters":{"rope_type":"default","rope_theta":500000}`,
		`"rope_scaling":{"type":"linear","factor":2},"rope_parameters":{"rope_type":"linear","factor":2.0}`,
		`"layer_types":["full_attention"],"rope_parameters":{"full_attention":{"rope_type":"linear","factor":2,"rope_theta":7}}`,
	} {
		c, err := ParseConfig([]byte("{" + base + "," + extra + "}"))
		if err != nil {
			t.Errorf("%s: %v", extra, err)
		} else if strings.Contains(extra, "full_attention") && (c.RopeTheta != 7 || c.RopeScaling == nil || c.RopeScaling.Factor != 2) {
			t.Errorf("%s: theta %g scaling %+v", extra, c.RopeTheta, c.RopeScaling)
		}
	}
}

// TestWriteConfigKeepsNumbersAndSetsBothDtypes: merge writes the base's
// config back with "dtype" and "torch_dtype" both naming the new storage
// dtype (transformers ≥ 4.56 reads "dtype" first), and every other value
// as written: 500000.0 stays 500000.0. Before, "dtype" kept the base's
// bfloat16 and floats became integers.
func TestWriteConfigKeepsNumbersAndSetsBothDtypes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "rope_layouts", "v4_llama3.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteConfig(dir, c, "float32"); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"dtype": `"float32"`, "torch_dtype": `"float32"`, "rope_theta": `500000.0`, "rms_norm_eps": `1e-05`} {
		if got := string(m[key]); got != want {
			t.Errorf("%s is written %s, want %s", key, got, want)
		}
	}
	if !strings.Contains(string(m["rope_scaling"]), `"factor": 8.0`) {
		t.Errorf("rope_scaling is written %s, want factor 8.0 as in the base", m["rope_scaling"])
	}
	back, err := ParseConfig(out)
	if err != nil || back.RopeTheta != c.RopeTheta || !sameScaling(back.RopeScaling, c.RopeScaling) {
		t.Fatalf("the written config reads back as %+v, %v", back, err)
	}
}
