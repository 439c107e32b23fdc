package train

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vkengine"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/optim"
)

// deviceOptimizer is AdamW or SGD with its whole state on the Vulkan
// device: each param's gradient summed over the step's micro-batches,
// AdamW's two moments and step count or SGD's momentum buffer, and the
// weights themselves (the training
// program's buffers, updated in place). Per step the host reads back
// three numbers per param (sum of squares, zeros, non-finite values) and
// takes the decisions applyStep takes on the host (skip, loss scale,
// clipping); the weights come back only when the host needs them
// (syncHost: a checkpoint, the final save, decoding). It implements
// optim.Optimizer with optim.AdamW's and optim.SGD's State layouts, so a
// checkpoint moves between engines.
type deviceOptimizer struct {
	g          *gpuEngine
	name       OptimizerKind // AdamW or SGD
	cfg        optim.AdamWConfig
	sgd        optim.SGDConfig
	params     []*optim.Param
	w          []*vulkan.Buffer // the weights: the training program's buffers
	grad, m, v []*vulkan.Buffer // m is SGD's momentum buffer; v is AdamW's only
	slot       []int64          // each param's step count (AdamW) or steps with momentum (SGD)
	steps      int64
	part       *vulkan.Buffer // GradStats' partial sums, reused param after param
	stats      *vulkan.Buffer // 3 words per param
	owned      []*vulkan.Buffer
	// stale: the device's weights and moments have moved past the host's
	// p.Value and hostM, hostV (syncHost brings them back).
	stale        bool
	hostM, hostV [][]float32
	// counts are the training program's transfers, to which the step's
	// statistics add.
	counts *vkengine.Transfers
}

func newDeviceOptimizer(g *gpuEngine, c OptimizerConfig, params []*optim.Param, weight func(name string) *vulkan.Buffer) (*deviceOptimizer, error) {
	o := &deviceOptimizer{g: g, name: c.Name, cfg: adamWConfig(c), sgd: sgdConfig(c), params: params, slot: make([]int64, len(params)),
		hostM: make([][]float32, len(params)), hostV: make([][]float32, len(params))}
	alloc := func(bytes int) (*vulkan.Buffer, error) {
		b, err := g.dev.NewBuffer(max(bytes, 4))
		if err == nil {
			o.owned = append(o.owned, b)
		}
		return b, err
	}
	groups := 1
	for _, p := range params {
		w := weight(p.Name)
		if w == nil || w.Size() < 4*len(p.Value) {
			o.close()
			return nil, fmt.Errorf("internal: no fp32 device weight for trainable %s", p.Name)
		}
		o.w = append(o.w, w)
		for _, dst := range []*[]*vulkan.Buffer{&o.grad, &o.m, &o.v} {
			b, err := alloc(4 * len(p.Value))
			if err != nil {
				o.close()
				return nil, err
			}
			*dst = append(*dst, b)
		}
		groups = max(groups, vulkan.GradStatsGroups(len(p.Value)))
	}
	var err error
	if o.part, err = alloc(4 * 3 * groups); err == nil {
		o.stats, err = alloc(4 * 3 * len(params))
	}
	if err == nil {
		err = o.zeroMoments(0, len(params))
	}
	if err != nil {
		o.close()
		return nil, err
	}
	return o, nil
}

func (o *deviceOptimizer) close() {
	for _, b := range o.owned {
		b.Free()
	}
	o.owned = nil
}

func (o *deviceOptimizer) zeroMoments(lo, hi int) error {
	for i := lo; i < hi; i++ {
		z := make([]float32, len(o.params[i].Value))
		if err := o.m[i].WriteFloat32(0, z); err != nil {
			return err
		}
		if err := o.v[i].WriteFloat32(0, z); err != nil {
			return err
		}
	}
	return nil
}

// accumulate records, after a micro-batch's backward pass, the addition
// of its gradients (the training program's buffers, grads) into the
// step's: the first micro-batch's are copied.
func (o *deviceOptimizer) accumulate(r *vulkan.Recorder, grads []*vulkan.Buffer, first bool) error {
	ks := o.g.eng.Kernels
	r.SetScope(vulkan.Scope{Kind: "gradient accumulation"})
	for i, p := range o.params {
		n := len(p.Value)
		var err error
		if first {
			err = ks.Scale(r, grads[i], o.grad[i], n, 1, vulkan.NoRounding)
		} else {
			err = ks.AddScaled(r, o.grad[i], grads[i], o.grad[i], n, 1, false, vulkan.NoRounding)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// gradStats are the step's gradient statistics, per param.
type gradStats struct {
	sumSq     []float32
	zeros     int64
	nonFinite int64
	values    int64
}

func (o *deviceOptimizer) readStats() (gradStats, error) {
	ks := o.g.eng.Kernels
	err := o.g.eng.Submit(func(r *vulkan.Recorder) error {
		r.SetScope(vulkan.Scope{Kind: "gradient statistics"})
		for i, p := range o.params {
			if err := ks.GradStats(r, o.grad[i], 0, len(p.Value), o.part, o.stats, i); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return gradStats{}, err
	}
	raw := make([]byte, 12*len(o.params))
	if err := o.stats.Read(0, raw); err != nil {
		return gradStats{}, err
	}
	if o.counts != nil {
		o.counts.Down += int64(len(raw))
	}
	st := gradStats{sumSq: make([]float32, len(o.params))}
	for i, p := range o.params {
		st.sumSq[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[12*i:]))
		st.zeros += int64(binary.LittleEndian.Uint32(raw[12*i+4:]))
		st.nonFinite += int64(binary.LittleEndian.Uint32(raw[12*i+8:]))
		st.values += int64(len(p.Value))
	}
	return st, nil
}

// apply is applyStep on the device: unscale, check, clip and step, with
// the decisions and the loss scaler on the host.
func (o *deviceOptimizer) apply(scaler *amp.LossScaler, clip, lr float64, anyTargets, finiteLoss bool) (update, error) {
	st, err := o.readStats()
	if err != nil {
		return update{}, err
	}
	finite := st.nonFinite == 0 && finiteLoss
	u := update{zeroFrac: float64(st.zeros) / float64(max(st.values, 1))}
	if finite && anyTargets {
		// the unscaled gradients' norm: scales are powers of two, so
		// unscaling is exact and the norm is the scaled one's times inv
		inv := float32(1)
		if scaler != nil {
			inv = float32(1 / float64(scaler.Scale()))
		}
		var sum float64
		for _, s := range st.sumSq {
			sum += float64(s)
		}
		u.gradNorm = math.Sqrt(sum) * float64(inv)
		coef := clipCoefficient(u.gradNorm, clip)
		if f := inv * coef; f != 1 {
			if err := o.scaleGrads(f); err != nil {
				return u, err
			}
		}
		if err := o.Step(o.params, lr); err != nil {
			return u, err
		}
		u.stepped = true
	}
	if scaler != nil {
		scaler.Update(!finite)
	}
	return u, nil
}

// clipCoefficient is the factor optim.ClipGlobalNorm multiplies the
// gradients by for a global norm: 1 when no clipping applies.
func clipCoefficient(norm, maxNorm float64) float32 {
	if !(maxNorm > 0) || !(norm > maxNorm) || math.IsInf(norm, 0) {
		return 1
	}
	n32 := float32(norm) + float32(1e-6)
	if math.IsInf(float64(n32), 0) {
		return float32(maxNorm / (norm + 1e-6))
	}
	if coef := float32(1/n32) * float32(maxNorm); coef < 1 {
		return coef
	}
	return 1
}

func (o *deviceOptimizer) scaleGrads(f float32) error {
	ks := o.g.eng.Kernels
	return o.g.eng.Submit(func(r *vulkan.Recorder) error {
		r.SetScope(vulkan.Scope{Kind: "gradient scaling"})
		for i, p := range o.params {
			if err := ks.Scale(r, o.grad[i], o.grad[i], len(p.Value), f, vulkan.NoRounding); err != nil {
				return err
			}
		}
		return nil
	})
}

// Name is the host optimizer's: the state is the same wherever it lives.
func (o *deviceOptimizer) Name() string { return string(o.name) }

// Step applies the update to every param on the device, from the step's
// summed gradients (params are o's; the argument is for optim.Optimizer).
func (o *deviceOptimizer) Step(params []*optim.Param, lr float64) error {
	if len(params) != len(o.params) {
		return fmt.Errorf("optim: %s (device): step: %d params, the optimizer holds %d", o.name, len(params), len(o.params))
	}
	if !(lr >= 0) || math.IsInf(lr, 0) {
		return fmt.Errorf("optim: %s (device): step: learning rate %v", o.name, lr)
	}
	ks := o.g.eng.Kernels
	err := o.g.eng.Submit(func(r *vulkan.Recorder) error {
		r.SetScope(vulkan.Scope{Kind: "optimizer step"})
		for i, p := range o.params {
			if o.name == SGD {
				var m *vulkan.Buffer
				if o.sgd.Momentum != 0 {
					m = o.m[i]
				}
				s := vulkan.SGDStep{LR: lr, Momentum: o.sgd.Momentum, WeightDecay: o.sgd.WeightDecay, Nesterov: o.sgd.Nesterov, First: o.slot[i] == 0}
				if err := ks.SGD(r, s, o.w[i], o.grad[i], m, len(p.Value)); err != nil {
					return err
				}
				continue
			}
			bc1, bc2 := optim.AdamWBiasCorrections(o.cfg, o.slot[i]+1)
			s := vulkan.AdamWStep{LR: lr, Beta1: o.cfg.Beta1, Beta2: o.cfg.Beta2, Eps: o.cfg.Eps, WeightDecay: o.cfg.WeightDecay,
				BiasCorrection1: bc1, BiasCorrection2: bc2}
			if err := ks.AdamW(r, s, o.w[i], o.grad[i], o.m[i], o.v[i], len(p.Value)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := range o.slot {
		if o.name != SGD || o.sgd.Momentum != 0 {
			o.slot[i]++
		}
	}
	o.steps++
	o.stale = true
	return nil
}

// State is the moments as syncHost last read them, in optim.AdamW's or
// optim.SGD's layout: a checkpoint calls syncHost first.
func (o *deviceOptimizer) State() optim.State {
	st := optim.State{Step: o.steps, Scalars: map[string]float64{}, Tensors: map[string][]float32{}}
	for i, p := range o.params {
		if o.slot[i] == 0 || o.hostM[i] == nil {
			continue // no slot for a param not yet stepped (SGD: nor without momentum)
		}
		if o.name == SGD {
			st.Tensors[p.Name+".momentum_buffer"] = append([]float32(nil), o.hostM[i]...)
			continue
		}
		st.Scalars[p.Name+".step"] = float64(o.slot[i])
		st.Tensors[p.Name+".exp_avg"] = append([]float32(nil), o.hostM[i]...)
		st.Tensors[p.Name+".exp_avg_sq"] = append([]float32(nil), o.hostV[i]...)
	}
	return st
}

// Load uploads a state in optim.AdamW's or optim.SGD's layout (checked
// by that optimizer's own Load first).
func (o *deviceOptimizer) Load(st optim.State) error {
	var check optim.Optimizer
	var err error
	if o.name == SGD {
		check, err = optim.NewSGD(o.sgd)
	} else {
		check, err = optim.NewAdamW(o.cfg)
	}
	if err == nil {
		err = check.Load(st)
	}
	if err != nil {
		return fmt.Errorf("optim: %s (device): load: %w", o.name, err)
	}
	if o.name == SGD {
		return o.loadSGD(st)
	}
	for _, p := range o.params {
		m, okM := st.Tensors[p.Name+".exp_avg"]
		v, okV := st.Tensors[p.Name+".exp_avg_sq"]
		if okM != okV || okM && (len(m) != len(p.Value) || len(v) != len(p.Value)) {
			return fmt.Errorf("optim: adamw (device): load: state of %s does not fit its %d values", p.Name, len(p.Value))
		}
	}
	for i, p := range o.params {
		m, ok := st.Tensors[p.Name+".exp_avg"]
		if !ok {
			o.slot[i], o.hostM[i], o.hostV[i] = 0, nil, nil
			if err := o.zeroMoments(i, i+1); err != nil {
				return err
			}
			continue
		}
		v := st.Tensors[p.Name+".exp_avg_sq"]
		if err := o.m[i].WriteFloat32(0, m); err != nil {
			return err
		}
		if err := o.v[i].WriteFloat32(0, v); err != nil {
			return err
		}
		o.hostM[i], o.hostV[i] = append([]float32(nil), m...), append([]float32(nil), v...)
		o.slot[i] = int64(st.Scalars[p.Name+".step"])
	}
	o.steps = st.Step
	return nil
}

// syncHost copies the device's weights into the params' host values, and
// its moments into the host's copies State reads, when they have moved
// (reports whether they had).
func (o *deviceOptimizer) syncHost() (bool, error) {
	if !o.stale {
		return false, nil
	}
	for i, p := range o.params {
		if err := o.w[i].ReadFloat32(0, p.Value); err != nil {
			return false, fmt.Errorf("read %s from the device: %w", p.Name, err)
		}
		if o.slot[i] == 0 || o.name == SGD && o.sgd.Momentum == 0 {
			continue
		}
		if o.hostM[i] == nil {
			o.hostM[i], o.hostV[i] = make([]float32, len(p.Value)), make([]float32, len(p.Value))
		}
		if err := o.m[i].ReadFloat32(0, o.hostM[i]); err != nil {
			return false, fmt.Errorf("read the moments of %s from the device: %w", p.Name, err)
		}
		if o.name == SGD {
			continue
		}
		if err := o.v[i].ReadFloat32(0, o.hostV[i]); err != nil {
			return false, fmt.Errorf("read the moments of %s from the device: %w", p.Name, err)
		}
	}
	o.stale = false
	return true, nil
}

// loadSGD uploads SGD's momentum buffers (checked by optim.SGD.Load).
func (o *deviceOptimizer) loadSGD(st optim.State) error {
	for i, p := range o.params {
		m, ok := st.Tensors[p.Name+".momentum_buffer"]
		if !ok {
			o.slot[i], o.hostM[i] = 0, nil
			continue
		}
		if len(m) != len(p.Value) {
			return fmt.Errorf("optim: sgd (device): load: momentum of %s has %d values for %d", p.Name, len(m), len(p.Value))
		}
		if err := o.m[i].WriteFloat32(0, m); err != nil {
			return err
		}
		o.slot[i], o.hostM[i] = 1, append([]float32(nil), m...)
	}
	o.steps = st.Step
	return nil
}

// gradsToHost copies the step's summed gradients into the params' host
// buffers, for a data-parallel sum over MPI.
func (o *deviceOptimizer) gradsToHost() error {
	for i, p := range o.params {
		if err := o.grad[i].ReadFloat32(0, p.Grad); err != nil {
			return fmt.Errorf("read the gradient of %s from the device: %w", p.Name, err)
		}
		if o.counts != nil {
			o.counts.Down += int64(4 * len(p.Grad))
		}
	}
	return nil
}

// gradsToDevice copies the params' host gradients (the sums over the
// ranks) back to the device.
func (o *deviceOptimizer) gradsToDevice() error {
	for i, p := range o.params {
		if err := o.grad[i].WriteFloat32(0, p.Grad); err != nil {
			return fmt.Errorf("write the gradient of %s to the device: %w", p.Name, err)
		}
		if o.counts != nil {
			o.counts.Up += int64(4 * len(p.Grad))
		}
	}
	return nil
}
