package jsonfloat

import (
	"encoding/json"
	"math"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, x := range []float64{0, -1.5, 1e300, math.NaN(), math.Inf(1), math.Inf(-1), math.SmallestNonzeroFloat64} {
		b, err := json.Marshal(struct{ F Float }{Float(x)})
		if err != nil {
			t.Fatalf("%v: %v", x, err)
		}
		var back struct{ F Float }
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if y := float64(back.F); y != x && !(math.IsNaN(x) && math.IsNaN(y)) {
			t.Fatalf("%v came back as %v (%s)", x, y, b)
		}
	}
	if b, _ := json.Marshal(Float(math.NaN())); string(b) != `"NaN"` {
		t.Fatalf("NaN is written %s", b)
	}
	var f Float
	if err := json.Unmarshal([]byte(`"nan"`), &f); err == nil {
		t.Fatal(`"nan" was read as a number`)
	}
}
