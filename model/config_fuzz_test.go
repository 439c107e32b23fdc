package model

import (
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzReadConfig: no config.json makes ReadConfig panic; its errors name
// the file; what it accepts is valid, small enough that the model's tensor
// list can be made and its sizes computed without overflow, and written
// back by WriteConfig reads back the same.
func FuzzReadConfig(f *testing.F) {
	for _, s := range []string{
		`{"model_type":"llama","vocab_size":259,"hidden_size":16,"intermediate_size":24,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":64,"rms_norm_eps":1e-5,"rope_theta":10000,"bos_token_id":256,"eos_token_id":257,"pad_token_id":258}`,
		`{"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":8,"eos_token_id":[3,4],"bos_token_id":1,"pad_token_id":null}`,
		`{"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"head_dim":6,"max_position_embeddings":8,"tie_word_embeddings":true,"torch_dtype":"bfloat16","initializer_range":0.02}`,
		`{"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"head_dim":-4,"max_position_embeddings":8}`,
		`{"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":8,"rope_scaling":{"type":"linear","factor":2}}`,
		`{"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":8,"model_type":"mistral","hidden_act":"gelu","attention_bias":true}`,
		`{"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":8,"num_key_value_heads":"2"}`,
		`{"vocab_size":4,"hidden_size":4,"intermediate_size":4,"num_hidden_layers":1000000000000,"num_attention_heads":2,"max_position_embeddings":8}`,
		`{"vocab_size":4611686018427387904,"hidden_size":4611686018427387904,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":1,"max_position_embeddings":9223372036854775807}`,
		`{"vocab_size":10,"hidden_size":4,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":1,"head_dim":4611686018427387904,"max_position_embeddings":8}`,
		`[]`, `null`, `{}`, `{"vocab_size":1e400}`, `{"vocab_size":1.5}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "config.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := ReadConfig(dir)
		_, perr := ParseConfig(b)
		if (err == nil) != (perr == nil) {
			t.Fatalf("ReadConfig: %v, but ParseConfig: %v", err, perr)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("error %q does not start with the file", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted %+v, which does not validate: %v", c, err)
		}
		checkSizes(t, c)

		out := t.TempDir()
		if err := WriteConfig(out, c, "bfloat16"); err != nil {
			t.Fatalf("WriteConfig(%+v): %v", c, err)
		}
		got, err := ReadConfig(out)
		if err != nil {
			written, _ := os.ReadFile(filepath.Join(out, "config.json"))
			t.Fatalf("WriteConfig(%+v) wrote\n%s\nwhich reads back with %v", c, written, err)
		}
		want := c
		want.TorchDtype = "bfloat16"
		want.Raw = got.Raw // a config read from a file is written back from its own JSON
		if len(c.Raw) == 0 {
			want.HeadDim = c.HeadDimension()
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
		}
	})
}

// checkSizes computes the parameter count exactly, independently of
// Specs, and then checks that Specs agrees without overflowing an int.
func checkSizes(t *testing.T, c Config) {
	t.Helper()
	bi := func(v int) *big.Int { return big.NewInt(int64(v)) }
	mul := func(xs ...*big.Int) *big.Int {
		p := big.NewInt(1)
		for _, x := range xs {
			p.Mul(p, x)
		}
		return p
	}
	d, f, hd := bi(c.HiddenSize), bi(c.IntermediateSize), bi(c.HeadDimension())
	q, kv := mul(bi(c.NumAttentionHeads), hd), mul(bi(c.NumKeyValueHeads), hd)
	layer := new(big.Int).Add(mul(big.NewInt(2), d), mul(big.NewInt(2), q, d)) // norms, q_proj and o_proj
	layer.Add(layer, mul(big.NewInt(2), kv, d))                                // k_proj, v_proj
	layer.Add(layer, mul(big.NewInt(3), f, d))                                 // gate, up, down
	total := mul(layer, bi(c.NumHiddenLayers))
	heads := int64(2)
	if c.TieWordEmbeddings {
		heads = 1
	}
	total.Add(total, mul(big.NewInt(heads), bi(c.VocabSize), d))
	total.Add(total, d)
	if total.Cmp(big.NewInt(1<<40)) > 0 || c.NumHiddenLayers > 1<<16 {
		t.Fatalf("accepted %+v: %v parameters in %d layers; nothing could load that", c, total, c.NumHiddenLayers)
	}
	n := 0
	for _, s := range Specs(c) {
		n += numel(s.Shape)
	}
	if int64(n) != total.Int64() {
		t.Fatalf("Specs count %d parameters, want %v", n, total)
	}
}
