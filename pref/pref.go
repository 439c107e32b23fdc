// Package pref computes the preference-tuning objectives of TRL's
// DPOTrainer, ORPOTrainer and CPOTrainer (SimPO) from per-sequence
// log-probabilities: each pair's chosen and rejected completion, summed
// over the completion's tokens only (nn.SequenceLogProbs).
//
// A batch of P pairs runs as one model batch of 2P rows, chosen rows
// [0, P) then rejected rows [P, 2P), as TRL's concatenated_forward does.
// The objectives are functions of those 2P sums, their token counts and,
// for DPO, the reference model's sums, so they are computed on the host
// in float64 (nn.HostLoss) with their gradient, which the graph carries
// back through the sums to the adapter.
package pref

import (
	"fmt"
	"math"
)

// Loss names an objective, as the recipe's objective and dpo.loss_type do.
type Loss string

const (
	// Sigmoid is DPO: −log σ(β·h) with h = (πθ⁺−πref⁺) − (πθ⁻−πref⁻),
	// with label smoothing ε (cDPO): −(1−ε)·log σ(βh) − ε·log σ(−βh).
	Sigmoid Loss = "sigmoid"
	// Robust is rDPO: (−(1−ε)·log σ(βh) + ε·log σ(−βh)) / (1−2ε).
	Robust Loss = "robust"
	// IPO is (h − 1/(2β))², with every log-probability (policy and
	// reference) averaged over its completion's tokens, as TRL does.
	IPO Loss = "ipo"
	// ORPO is the chosen completions' mean token NLL minus
	// λ·mean log σ(log odds), on length-averaged log-probabilities p:
	// log odds = (p⁺ − p⁻) − (log(1−e^{p⁺}) − log(1−e^{p⁻})). No reference.
	ORPO Loss = "orpo"
	// SimPO is −log σ(β·(p⁺ − p⁻) − γ) on length-averaged
	// log-probabilities (CPOTrainer's loss_type simpo with cpo_alpha 0
	// and no label smoothing). No reference.
	SimPO Loss = "simpo"
)

// TRL's defaults: DPOConfig and ORPOConfig beta 0.1 (ORPO's λ), and the
// SimPO paper's β 2.0 with CPOConfig's simpo_gamma 0.5.
const (
	DefaultDPOBeta    = 0.1
	DefaultORPOLambda = 0.1
	DefaultSimPOBeta  = 2.0
	DefaultSimPOGamma = 0.5
)

// Objective is one preference loss with its parameters, validated.
type Objective struct {
	Loss Loss
	// Beta is β of DPO, IPO and SimPO, and ORPO's λ (TRL calls it beta too).
	Beta float64
	// LabelSmoothing is ε of Sigmoid and Robust, in [0, 0.5).
	LabelSmoothing float64
	// Gamma is SimPO's target margin γ.
	Gamma float64
}

// Validate reports a parameter outside its domain.
func (o Objective) Validate() error {
	switch o.Loss {
	case Sigmoid, Robust, IPO, ORPO, SimPO:
	default:
		return fmt.Errorf("preference loss %q: want sigmoid, robust, ipo, orpo or simpo", o.Loss)
	}
	if !(o.Beta > 0) || math.IsInf(o.Beta, 0) {
		return fmt.Errorf("%s: beta %v must be positive", o.Loss, o.Beta)
	}
	if !(o.LabelSmoothing >= 0 && o.LabelSmoothing < 0.5) {
		return fmt.Errorf("%s: label_smoothing %v must be in [0, 0.5)", o.Loss, o.LabelSmoothing)
	}
	if o.LabelSmoothing != 0 && o.Loss != Sigmoid && o.Loss != Robust {
		return fmt.Errorf("%s: label_smoothing applies to the sigmoid and robust losses only", o.Loss)
	}
	if math.IsNaN(o.Gamma) || math.IsInf(o.Gamma, 0) || o.Gamma != 0 && o.Loss != SimPO {
		return fmt.Errorf("%s: gamma %v is SimPO's only", o.Loss, o.Gamma)
	}
	return nil
}

// NeedsReference says whether the objective compares with a reference
// model: DPO's losses do, ORPO and SimPO do not.
func (o Objective) NeedsReference() bool {
	return o.Loss == Sigmoid || o.Loss == Robust || o.Loss == IPO
}

// averaged says whether the objective reads log-probabilities averaged
// over their completion's tokens instead of summed.
func (o Objective) averaged() bool { return o.Loss == IPO || o.Loss == ORPO || o.Loss == SimPO }

// Batch is one micro-batch of P pairs: the reference's summed
// log-probabilities and every row's completion length, in the model
// batch's row order (chosen [0, P), rejected [P, 2P)). Reference is nil
// for objectives without one.
type Batch struct {
	Reference []float64
	Tokens    []int
}

// Norm holds the whole optimizer step's totals, so that the losses of its
// micro-batches add up to the loss of the step as one batch: the pairs
// (every loss is a mean over pairs) and the chosen completions' tokens
// (ORPO's NLL is a mean over them).
type Norm struct {
	Pairs, ChosenTokens int
}

// Stats are a micro-batch's sums of TRL's per-pair metrics; Add them up
// over a step and divide by Pairs (Means).
type Stats struct {
	Pairs                                                            int
	RewardChosen, RewardRejected, Accuracy, LogpChosen, LogpRejected float64
}

// Add accumulates s2 into s.
func (s *Stats) Add(s2 Stats) {
	s.Pairs += s2.Pairs
	s.RewardChosen += s2.RewardChosen
	s.RewardRejected += s2.RewardRejected
	s.Accuracy += s2.Accuracy
	s.LogpChosen += s2.LogpChosen
	s.LogpRejected += s2.LogpRejected
}

// Sums returns s's fields as float64s, for adding over processes
// (StatsOf reads them back): Pairs, then the metrics' sums.
func (s Stats) Sums() []float64 {
	return []float64{float64(s.Pairs), s.RewardChosen, s.RewardRejected, s.Accuracy, s.LogpChosen, s.LogpRejected}
}

// StatsOf is the Stats whose Sums are v.
func StatsOf(v []float64) Stats {
	return Stats{Pairs: int(v[0]), RewardChosen: v[1], RewardRejected: v[2], Accuracy: v[3], LogpChosen: v[4], LogpRejected: v[5]}
}

// Means returns the metrics under TRL's names: means over the pairs.
func (s Stats) Means() map[string]float64 {
	n := float64(max(s.Pairs, 1))
	return map[string]float64{
		"rewards/chosen":     s.RewardChosen / n,
		"rewards/rejected":   s.RewardRejected / n,
		"rewards/accuracies": s.Accuracy / n,
		"rewards/margins":    (s.RewardChosen - s.RewardRejected) / n,
		"logps/chosen":       s.LogpChosen / n,
		"logps/rejected":     s.LogpRejected / n,
	}
}

// Eval returns the micro-batch's share of the step's loss for the
// policy's summed log-probabilities logps (2P values), writes its
// gradient with respect to them into grad, and returns the metrics.
func (o Objective) Eval(logps []float64, b Batch, n Norm, grad []float64) (float64, Stats, error) {
	rows := len(logps)
	if rows == 0 || rows%2 != 0 || len(b.Tokens) != rows || len(grad) != rows || o.NeedsReference() && len(b.Reference) != rows {
		return 0, Stats{}, fmt.Errorf("%s: %d log-probabilities, %d lengths and %d reference values for a batch of pairs", o.Loss, rows, len(b.Tokens), len(b.Reference))
	}
	if n.Pairs < rows/2 || o.Loss == ORPO && n.ChosenTokens < 1 {
		return 0, Stats{}, fmt.Errorf("%s: the step's %d pairs and %d chosen tokens do not cover the micro-batch", o.Loss, n.Pairs, n.ChosenTokens)
	}
	for i, t := range b.Tokens {
		if t < 1 {
			return 0, Stats{}, fmt.Errorf("%s: row %d has no completion tokens", o.Loss, i)
		}
	}
	p := rows / 2
	// scale[i] is d(logp used)/d(logp summed): 1/tokens when averaged
	scale := make([]float64, rows)
	x := make([]float64, rows) // the log-probabilities the loss reads
	ref := make([]float64, rows)
	for i := range logps {
		scale[i] = 1
		if o.averaged() {
			scale[i] = 1 / float64(b.Tokens[i])
		}
		x[i] = logps[i] * scale[i]
		if o.NeedsReference() {
			ref[i] = b.Reference[i] * scale[i]
		}
	}
	clear(grad)
	var loss float64
	var st Stats
	st.Pairs = p
	perPair := 1 / float64(n.Pairs)
	for i := 0; i < p; i++ {
		c, r := x[i], x[p+i]
		var l, dc, dr, rc, rr float64 // loss, ∂l/∂c, ∂l/∂r, rewards
		switch o.Loss {
		case Sigmoid, Robust, IPO:
			h := (c - ref[i]) - (r - ref[p+i])
			var dh float64
			l, dh = o.dpo(h)
			dc, dr = dh, -dh
			rc, rr = o.Beta*(c-ref[i]), o.Beta*(r-ref[p+i])
		case SimPO:
			z := o.Beta*(c-r) - o.Gamma
			l = -logSigmoid(z)
			dz := -sigmoid(-z)
			dc, dr = o.Beta*dz, -o.Beta*dz
			rc, rr = o.Beta*c, o.Beta*r
		case ORPO:
			// log odds = (c − r) − (log1p(−eᶜ) − log1p(−eʳ))
			lo := (c - r) - (log1mexp(c) - log1mexp(r))
			l = -o.Beta * logSigmoid(lo)
			dlo := -o.Beta * sigmoid(-lo)
			// d/dc [c − log(1−eᶜ)] = 1 + eᶜ/(1−eᶜ) = 1/(1−eᶜ)
			dc, dr = dlo/(-math.Expm1(c)), -dlo/(-math.Expm1(r))
			rc, rr = o.Beta*c, o.Beta*r
		}
		loss += l * perPair
		grad[i] += dc * perPair * scale[i]
		grad[p+i] += dr * perPair * scale[p+i]
		st.RewardChosen += rc
		st.RewardRejected += rr
		if rc > rr {
			st.Accuracy++
		}
		st.LogpChosen += c
		st.LogpRejected += r
	}
	if o.Loss == ORPO { // the chosen completions' NLL, a mean over the step's chosen tokens
		inv := 1 / float64(n.ChosenTokens)
		for i := 0; i < p; i++ {
			loss -= logps[i] * inv
			grad[i] -= inv
		}
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, Stats{}, fmt.Errorf("%s: the loss is %v", o.Loss, loss)
	}
	return loss, st, nil
}

// dpo returns the DPO-family loss of one pair's h and its derivative.
func (o Objective) dpo(h float64) (float64, float64) {
	e := o.LabelSmoothing
	z := o.Beta * h
	switch o.Loss {
	case IPO:
		d := h - 1/(2*o.Beta)
		return d * d, 2 * d
	case Robust:
		// d/dz log σ(z) = σ(−z); d/dz log σ(−z) = −σ(z)
		l := (-(1-e)*logSigmoid(z) + e*logSigmoid(-z)) / (1 - 2*e)
		dz := (-(1-e)*sigmoid(-z) - e*sigmoid(z)) / (1 - 2*e)
		return l, o.Beta * dz
	default:
		l := -(1-e)*logSigmoid(z) - e*logSigmoid(-z)
		dz := -(1-e)*sigmoid(-z) + e*sigmoid(z)
		return l, o.Beta * dz
	}
}

// logSigmoid is log σ(z) without overflow for either sign.
func logSigmoid(z float64) float64 {
	if z >= 0 {
		return -math.Log1p(math.Exp(-z))
	}
	return z - math.Log1p(math.Exp(z))
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

// log1mexp is log(1 − eˣ) for x < 0, as torch.log1p(−torch.exp(x)).
func log1mexp(x float64) float64 { return math.Log1p(-math.Exp(x)) }

// Step binds an objective to one micro-batch's reference and lengths
// and the step's totals: the nn.VectorLoss of the graph's loss node, which
// keeps the last forward pass's metrics.
type Step struct {
	Objective Objective
	Batch     Batch
	Norm      Norm
	// Padding counts the batch's last pairs that are padding (a
	// data-parallel rank's smaller share of a batch), with no loss and no
	// gradient: of a batch of P pairs, chosen rows [P−Padding, P) and
	// rejected rows [2P−Padding, 2P).
	Padding int
	Stats   Stats // the last Loss call's
}

// Loss implements nn.VectorLoss.
func (s *Step) Loss(logps, grad []float64) (float64, error) {
	P := len(logps) / 2
	n := P - s.Padding
	if s.Padding <= 0 || n < 0 || len(logps)%2 != 0 {
		l, st, err := s.Objective.Eval(logps, s.Batch, s.Norm, grad)
		s.Stats = st
		return l, err
	}
	clear(grad)
	s.Stats = Stats{}
	if n == 0 {
		return 0, nil
	}
	keep := func(x []float64) []float64 {
		if len(x) != 2*P {
			return x // Eval reports the mismatch
		}
		return append(append([]float64(nil), x[:n]...), x[P:P+n]...)
	}
	var ts []int
	if len(s.Batch.Tokens) == 2*P {
		ts = append(append(ts, s.Batch.Tokens[:n]...), s.Batch.Tokens[P:P+n]...)
	}
	b := Batch{Tokens: ts, Reference: keep(s.Batch.Reference)}
	g := make([]float64, 2*n)
	l, st, err := s.Objective.Eval(keep(logps), b, s.Norm, g)
	copy(grad[:n], g[:n])
	copy(grad[P:P+n], g[n:])
	s.Stats = st
	return l, err
}
