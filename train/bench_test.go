package train

import "testing"

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
