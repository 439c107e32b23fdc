package model

import (
	"strings"
	"testing"
)

// TestConfigLimits: config.json values that would overflow a size or make
// a loop over the layers run for hours are errors, and so is a negative
// head_dim (it was ignored, then written back as given). Found by
// FuzzReadConfig; before, a config with 10^12 layers was accepted and
// listing its tensors (Specs, which train.Load calls to check the
// adapter's targets) ran out of memory.
func TestConfigLimits(t *testing.T) {
	base := `"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_attention_heads":2,"max_position_embeddings":8`
	for _, tc := range []struct{ json, want string }{
		{`{` + base + `,"num_hidden_layers":1,"head_dim":-4}`, "head_dim must be positive (or absent), got -4"},
		{`{` + base + `,"num_hidden_layers":1000000000000}`, "num_hidden_layers 1000000000000 is more than mixtune's limit of 65536"},
		{`{"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_attention_heads":2,"num_hidden_layers":1,"max_position_embeddings":9223372036854775807}`,
			"max_position_embeddings 9223372036854775807 is more than mixtune's limit of 16777216"},
		{`{"vocab_size":4611686018427387904,"hidden_size":4611686018427387904,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":1,"max_position_embeddings":8}`,
			"the model would have more than mixtune's limit of 1099511627776 parameters (2^40)"},
		{`{` + base + `,"num_hidden_layers":1,"head_dim":4611686018427387904}`, "the model would have more than mixtune's limit"},
		{`{"vocab_size":128256,"hidden_size":65536,"intermediate_size":262144,"num_hidden_layers":4096,"num_attention_heads":64,"max_position_embeddings":8}`,
			"the model would have more than mixtune's limit"},
	} {
		_, err := ParseConfig([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.json, err, tc.want)
		}
	}
	// Llama 3.1 405B's shape is within the limits.
	big := Config{VocabSize: 128256, HiddenSize: 16384, IntermediateSize: 53248, NumHiddenLayers: 126,
		NumAttentionHeads: 128, NumKeyValueHeads: 8, MaxPositionEmbeddings: 131072, RMSNormEps: 1e-5, RopeTheta: 500000,
		BOSTokenID: 128000, EOSTokenID: 128001, PadTokenID: -1}
	if err := big.Validate(); err != nil {
		t.Errorf("Llama 3.1 405B: %v", err)
	}
	if n, ok := big.paramCount(); !ok || n < 405e9 || n > 406e9 {
		t.Errorf("Llama 3.1 405B: %d parameters (ok %v), want about 405e9", n, ok)
	}
}
