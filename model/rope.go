package model

import (
	"math"

	"github.com/mixtune/mixtune/nn"
)

// InvFreq is the model's rotary inverse frequencies, head_dim/2 of them,
// computed in fp32 step by step as transformers' ROPE_INIT_FUNCTIONS
// compute them on a torch fp32 tensor: Python scalars meet the tensor as
// fp32 values, and every operation rounds to fp32. The explicit float32
// conversions keep Go from fusing a multiply and an add.
func (c Config) InvFreq() []float32 {
	inv := nn.RopeInvFreq(c.HeadDimension(), c.RopeTheta)
	rs := c.RopeScaling
	if rs == nil {
		return inv
	}
	factor := float32(rs.Factor)
	switch rs.Type {
	case "linear":
		for i := range inv {
			inv[i] = inv[i] / factor
		}
	case "llama3":
		old := float64(rs.OriginalMaxPositionEmbeddings)
		lowWavelen := float32(old / rs.LowFreqFactor)   // Python floats, then compared as fp32
		highWavelen := float32(old / rs.HighFreqFactor) // likewise
		twoPi := float32(2 * math.Pi)
		lff, span := float32(rs.LowFreqFactor), float32(rs.HighFreqFactor-rs.LowFreqFactor)
		for i, f := range inv {
			wavelen := twoPi / f
			scaled := f
			if wavelen > lowWavelen {
				scaled = f / factor
			}
			if !(wavelen < highWavelen) && !(wavelen > lowWavelen) { // medium frequencies: interpolate
				smooth := float32(float32(float32(old)/wavelen)-lff) / span
				a := float32(float32(1-smooth)*scaled) / factor
				scaled = a + float32(smooth*scaled)
			}
			inv[i] = scaled
		}
	}
	return inv
}
