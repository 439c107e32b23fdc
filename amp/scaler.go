package amp

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ScalerConfig are a dynamic loss scaler's settings, PyTorch GradScaler's
// defaults unless a config says otherwise.
type ScalerConfig struct {
	Init     float64 // initial scale (2^16)
	Growth   float64 // factor after Interval clean steps (2); must be > 1
	Backoff  float64 // factor after a step with a non-finite gradient (0.5); in (0, 1)
	Interval int     // clean steps between growths (2000)
	Min, Max float64 // optional bounds on the scale; 0 means none
}

// DefaultScaler is GradScaler's configuration.
func DefaultScaler() ScalerConfig {
	return ScalerConfig{Init: 65536, Growth: 2, Backoff: 0.5, Interval: 2000}
}

// Validate checks the settings a scaler cannot work with.
func (c ScalerConfig) Validate() error {
	var errs []string
	if !(c.Init > 0) || math.IsInf(c.Init, 0) || c.Init > math.MaxFloat32 {
		errs = append(errs, fmt.Sprintf("init_scale must be a positive fp32 number, got %g", c.Init))
	}
	if !(c.Growth > 1) || math.IsInf(c.Growth, 0) {
		errs = append(errs, fmt.Sprintf("growth_factor must be > 1, got %g", c.Growth))
	}
	if !(c.Backoff > 0 && c.Backoff < 1) {
		errs = append(errs, fmt.Sprintf("backoff_factor must be in (0, 1), got %g", c.Backoff))
	}
	if c.Interval < 1 {
		errs = append(errs, fmt.Sprintf("growth_interval must be >= 1, got %d", c.Interval))
	}
	if c.Min < 0 || c.Max < 0 || (c.Max > 0 && c.Min > c.Max) {
		errs = append(errs, fmt.Sprintf("min_scale (%g) and max_scale (%g) must be >= 0 with min <= max", c.Min, c.Max))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// LossScaler is dynamic loss scaling with GradScaler's semantics: the loss
// gradient is multiplied by the scale so small fp16 gradients survive,
// gradients are unscaled before clipping, a step with any non-finite
// gradient is skipped and the scale backed off, and after Interval clean
// steps the scale grows. Like GradScaler's, the scale is an fp32 number,
// so growth that would overflow fp32 is refused and the scale never
// becomes Inf.
type LossScaler struct {
	cfg     ScalerConfig
	scale   float32
	tracker int // clean steps since the last change
}

// NewLossScaler starts at cfg.Init.
func NewLossScaler(cfg ScalerConfig) (*LossScaler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &LossScaler{cfg: cfg, scale: float32(cfg.Init)}
	s.clamp()
	return s, nil
}

// Scale is the factor the loss gradient is multiplied by.
func (s *LossScaler) Scale() float32 { return s.scale }

// Unscale multiplies every gradient by 1/scale, computed as GradScaler
// does (fp32 of the fp64 reciprocal), and reports whether all of them were
// finite. Non-finite values are left non-finite: the step must be skipped.
func (s *LossScaler) Unscale(grads [][]float32) (finite bool) {
	inv := float32(1 / float64(s.scale))
	finite = true
	for _, g := range grads {
		for i, v := range g {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				finite = false
			}
			g[i] = v * inv
		}
	}
	return finite
}

// Update adjusts the scale after an optimizer step (taken or skipped).
func (s *LossScaler) Update(foundInf bool) {
	if foundInf {
		s.scale *= float32(s.cfg.Backoff)
		s.tracker = 0
		s.clamp()
		return
	}
	s.tracker++
	if s.tracker == s.cfg.Interval {
		if grown := s.scale * float32(s.cfg.Growth); !math.IsInf(float64(grown), 0) {
			s.scale = grown
			s.clamp()
		}
		s.tracker = 0
	}
}

func (s *LossScaler) clamp() {
	if s.cfg.Max > 0 && float64(s.scale) > s.cfg.Max {
		s.scale = float32(s.cfg.Max)
	}
	if s.cfg.Min > 0 && float64(s.scale) < s.cfg.Min {
		s.scale = float32(s.cfg.Min)
	}
}

// ScalerState is what a checkpoint saves to continue bit-identically.
type ScalerState struct {
	Scale   float32 `json:"scale"`
	Tracker int     `json:"growth_tracker"`
}

// State returns the scaler's state.
func (s *LossScaler) State() ScalerState { return ScalerState{Scale: s.scale, Tracker: s.tracker} }

// Load restores a saved state.
func (s *LossScaler) Load(st ScalerState) error {
	if !(st.Scale > 0) || math.IsInf(float64(st.Scale), 0) || st.Tracker < 0 || st.Tracker >= s.cfg.Interval {
		return fmt.Errorf("loss scaler state %+v is not valid for growth_interval %d", st, s.cfg.Interval)
	}
	s.scale, s.tracker = st.Scale, st.Tracker
	return nil
}

// ScalingMode says when a run scales its loss: Auto scales fp16 only (bf16
// has fp32's exponent range and needs none, as accelerate decides), On and
// Off force it.
type ScalingMode uint8

const (
	ScalingAuto ScalingMode = iota
	ScalingOn
	ScalingOff
)

// For reports whether a run computing in low scales its loss.
func (m ScalingMode) For(low Format) bool {
	switch m {
	case ScalingOn:
		return true
	case ScalingOff:
		return false
	}
	return low == FP16
}

func (m ScalingMode) String() string {
	switch m {
	case ScalingOn:
		return "on"
	case ScalingOff:
		return "off"
	}
	return "auto"
}

// MarshalText writes auto, on or off.
func (m ScalingMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads auto, on or off.
func (m *ScalingMode) UnmarshalText(b []byte) error {
	switch strings.ToLower(strings.TrimSpace(string(b))) {
	case "auto":
		*m = ScalingAuto
	case "on":
		*m = ScalingOn
	case "off":
		*m = ScalingOff
	default:
		return fmt.Errorf("must be auto (on for fp16), on or off, got %q", b)
	}
	return nil
}
