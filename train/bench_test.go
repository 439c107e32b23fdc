package train

import (
	"math"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/quant"
)

// BenchmarkTrainStep is the fixed benchmark model's optimizer step on the
// default backend; `mixtune bench` reports the same with peak memory.
func BenchmarkTrainStep(b *testing.B) {
	c := DefaultBench()
	c.Steps, c.Warmup = b.N, 1
	res, err := Bench(c)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.TokensPerSec, "tokens/s")
	b.ReportMetric(res.MsPerStep, "ms/step")
}

// bench --quantize nf4 runs on a 4-bit base, whose weights take about 4.1
// bits per projection parameter against a bf16 base's 16.
func TestBenchQuantizedBase(t *testing.T) {
	c := DefaultBench()
	c.Steps, c.Warmup, c.Batch, c.SeqLen, c.BLAS, c.Threads = 1, 0, 1, 16, "gonum", 1
	c.BaseDtype, c.Precision = amp.BF16, amp.BF16
	plain, err := Bench(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Quantize = model.Quantization{Type: quant.NF4, Double: true}
	q, err := Bench(c)
	if err != nil {
		t.Fatal(err)
	}
	if q.Quantize != "nf4" || plain.Quantize != "" {
		t.Errorf("results name the base %q and %q", q.Quantize, plain.Quantize)
	}
	// projections: 4 layers × (4·256² + 3·256·688) parameters; the
	// embedding and head (2·512·256) and norms stay bf16
	proj := 4 * (4*256*256 + 3*256*688)
	saved := plain.WeightBytes - q.WeightBytes
	if want := 2*proj - proj*41/80; saved < want*95/100 {
		t.Errorf("nf4 saves %d bytes of %d, want about %d (4.1 bits instead of 16 per projection parameter)", saved, plain.WeightBytes, want)
	}
	if q.Params != plain.Params || math.IsNaN(q.Loss) {
		t.Errorf("nf4: %d params (bf16 base: %d), loss %v", q.Params, plain.Params, q.Loss)
	}
}
