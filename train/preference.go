package train

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/pref"
)

// Objective is what a run minimises: the supervised loss (sft) or a
// preference objective on chosen/rejected pairs (dpo, orpo, simpo).
type Objective string

const (
	// ObjectiveSFT is stored as "" so that recipes written before
	// objectives existed resolve, and hash, as they did.
	ObjectiveSFT   Objective = ""
	ObjectiveDPO   Objective = "dpo"
	ObjectiveORPO  Objective = "orpo"
	ObjectiveSimPO Objective = "simpo"
)

// UnmarshalText reads sft, dpo, orpo or simpo.
func (o *Objective) UnmarshalText(b []byte) error {
	switch s := Objective(b); s {
	case "sft":
		*o = ObjectiveSFT
		return nil
	case ObjectiveDPO, ObjectiveORPO, ObjectiveSimPO:
		*o = s
		return nil
	}
	return fmt.Errorf("must be sft, dpo, orpo or simpo, got %q", b)
}

// MarshalText writes dpo, orpo or simpo ("" for sft, which omitempty leaves out).
func (o Objective) MarshalText() ([]byte, error) { return []byte(o), nil }

// PreferenceConfig holds the preference objectives' parameters, each
// section for its objective (train.objective); a section left out takes
// TRL's defaults.
type PreferenceConfig struct {
	DPO   *DPOConfig   `yaml:"dpo,omitempty"`
	ORPO  *ORPOConfig  `yaml:"orpo,omitempty"`
	SimPO *SimPOConfig `yaml:"simpo,omitempty"`
}

// DPOConfig is DPOTrainer's loss: sigmoid (with label smoothing, cDPO),
// robust (rDPO) or ipo.
type DPOConfig struct {
	LossType       pref.Loss `yaml:"loss_type,omitempty"`
	Beta           *float64  `yaml:"beta,omitempty"`
	LabelSmoothing float64   `yaml:"label_smoothing,omitempty"`
}

// ORPOConfig is ORPOTrainer's λ (TRL's beta).
type ORPOConfig struct {
	Lambda *float64 `yaml:"lambda,omitempty"`
}

// SimPOConfig is SimPO's β and target margin γ.
type SimPOConfig struct {
	Beta  *float64 `yaml:"beta,omitempty"`
	Gamma *float64 `yaml:"gamma,omitempty"`
}

// preference is the recipe's objective with TRL's defaults filled in and
// the field its parameters came from; ok is false for sft.
func (r *Recipe) preference() (o pref.Objective, field string, ok bool) {
	or := func(p *float64, d float64) float64 {
		if p != nil {
			return *p
		}
		return d
	}
	var pc PreferenceConfig
	if r.Preference != nil {
		pc = *r.Preference
	}
	switch r.Train.Objective {
	case ObjectiveDPO:
		c := DPOConfig{LossType: pref.Sigmoid}
		if pc.DPO != nil {
			c = *pc.DPO
		}
		if c.LossType == "" {
			c.LossType = pref.Sigmoid
		}
		return pref.Objective{Loss: c.LossType, Beta: or(c.Beta, pref.DefaultDPOBeta), LabelSmoothing: c.LabelSmoothing}, "preference.dpo", true
	case ObjectiveORPO:
		var c ORPOConfig
		if pc.ORPO != nil {
			c = *pc.ORPO
		}
		return pref.Objective{Loss: pref.ORPO, Beta: or(c.Lambda, pref.DefaultORPOLambda)}, "preference.orpo", true
	case ObjectiveSimPO:
		var c SimPOConfig
		if pc.SimPO != nil {
			c = *pc.SimPO
		}
		return pref.Objective{Loss: pref.SimPO, Beta: or(c.Beta, pref.DefaultSimPOBeta), Gamma: or(c.Gamma, pref.DefaultSimPOGamma)}, "preference.simpo", true
	}
	return pref.Objective{}, "", false
}

// checkPreference checks the objective against its parameters and the
// data's layout.
func (r *Recipe) checkPreference(bad func(field, format string, args ...any)) {
	o, field, ok := r.preference()
	if p := r.Preference; p != nil {
		for _, s := range []struct {
			set  bool
			name string
			obj  Objective
		}{{p.DPO != nil, "preference.dpo", ObjectiveDPO}, {p.ORPO != nil, "preference.orpo", ObjectiveORPO}, {p.SimPO != nil, "preference.simpo", ObjectiveSimPO}} {
			if s.set && r.Train.Objective != s.obj {
				bad(s.name, "sets the %s objective's parameters, but train.objective is %s", s.obj, cmp.Or(string(r.Train.Objective), "sft"))
			}
		}
	}
	if !ok {
		return
	}
	if err := o.Validate(); err != nil {
		bad(field, "%v", err)
	}
	if r.Data.Mode == data.Pack {
		bad("data.mode", "pack is refused for preference pairs: each chosen and rejected sequence needs a row of its own (use pad)")
	}
}

// preferenceRun is what a preference run adds to the components: its
// pairs, the loss node's objective (bound into the training graph, set
// per micro-batch) and the reference pass.
type preferenceRun struct {
	pairs *data.PairLoader
	step  *pref.Step
	// reference is the base model without the adapter, run beside the
	// policy; nil without a reference, and for full fine-tuning, whose
	// pairs carry reference values computed before training.
	reference *runner
	// val are the validation pairs' batches, and policy the trained model
	// without gradients that evaluates them; both nil without data.validation.
	val    []data.PairBatch
	policy *runner
}

// logProbs runs the reference graph (no gradients) on bt and returns each
// row's summed target log-probability.
func (ru *runner) logProbs(bt data.Batch) ([]float64, error) {
	copy(ru.ids, bt.Inputs)
	copy(ru.tgt, bt.Targets)
	copy(ru.pos, bt.Positions)
	var v []float32
	if ru.vk != nil {
		if err := ru.syncWeights(); err != nil {
			return nil, err
		}
		if err := ru.vk.Run(nn.Pass{}); err != nil {
			return nil, err
		}
		v = make([]float32, ru.g.LogProbs.Shape().TotalSize())
		if err := ru.vk.Read(ru.g.LogProbs, v); err != nil {
			return nil, err
		}
	} else {
		if err := ru.eng.Run(ru.vm, nn.Pass{}); err != nil {
			return nil, err
		}
		v = ru.g.LogProbs.Value().Data().([]float32)
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out, nil
}

// preferenceStep is trainStep for a preference objective: GradAccum
// micro-batches of pairs, each computing its share of the step's loss
// (pref.Norm holds the step's totals, so the shares add up to the loss of
// the step as one batch), then the update. With several ranks each rank
// computes its pairs' share of every micro-batch; the gradients, the loss
// and the metrics' sums are added over the ranks, as for rows.
func (s *session) preferenceStep() (stepResult, error) {
	r, p, pr := s.r, s.parts, s.parts.pref
	micro := make([]data.PairBatch, r.Train.GradAccum)
	var norm pref.Norm
	total := 0
	for i := range micro {
		micro[i] = pr.pairs.Next()
		norm.Pairs += micro[i].Pairs
		norm.ChosenTokens += micro[i].ChosenTokens
		total += micro[i].NumTargets
	}
	res := stepResult{scale: 1, scaled: p.scaler != nil}
	if p.scaler != nil {
		res.scale = p.scaler.Scale()
	}
	var stats pref.Stats
	for i, bt := range micro {
		bt, padding := s.dp.pairShard(bt) // this rank's pairs; norm stays the global batch's
		s.dp.beforeMicro(i, len(micro))
		pr.step.Batch, pr.step.Norm, pr.step.Padding = pref.Batch{Tokens: bt.Tokens}, norm, padding
		var err error
		if pr.step.Batch.Reference, err = pr.referenceOf(bt); err != nil {
			return res, err
		}
		loss, err := p.trainer.run(bt.Batch, res.scale, i == 0, noiseKey(r.Seed, s.step, i))
		if err != nil {
			return res, err
		}
		if p.trainer.tapped && s.dp.fired != len(p.params) {
			return res, fmt.Errorf("internal: %d of %d gradient taps ran", s.dp.fired, len(p.params))
		}
		res.loss += loss
		stats.Add(pr.step.Stats)
	}
	var err error
	if res.rounded, res.underflowed, err = s.takeGradCounts(); err != nil {
		return res, err
	}
	// sum the gradients, the loss, the rounding counts and the metrics over the ranks
	sc := append([]float64{res.loss, float64(res.rounded), float64(res.underflowed)}, stats.Sums()...)
	if res.comm, err = s.reduce(sc); err != nil {
		return res, err
	}
	res.loss, res.rounded, res.underflowed = sc[0], int64(sc[1]), int64(sc[2])
	res.preference = pref.StatsOf(sc[3:]).Means()
	return s.update(res, total)
}

// preferenceData reads the training file as preference pairs. The chosen
// sequences also stand for the data in the run's header and its loader
// fingerprint (the SFT loader over them is never stepped).
func preferenceData(r *Recipe, f data.Format) (train, val []data.Pair, chosen []data.Example, err error) {
	if train, err = data.LoadPairs(r.Data.Train, f, r.Data.SeqLen); err != nil {
		return nil, nil, nil, err
	}
	if r.Data.Validation != "" {
		if val, err = data.LoadPairs(r.Data.Validation, f, r.Data.SeqLen); err != nil {
			return nil, nil, nil, err
		}
	}
	chosen = make([]data.Example, len(train))
	for i, p := range train {
		chosen[i] = p.Chosen
	}
	return train, val, chosen, nil
}

// preferenceRun makes a preference run's loader and validation batches,
// binds its objective into the training graph's options tg, and, for DPO
// with full fine-tuning, takes the reference values now, before training
// moves the weights; preferencePasses builds the passes that run beside
// the training graph.
func (c *components) preferenceRun(r *Recipe, o pref.Objective, pairs, val []data.Pair, rows int, tg *graphOptions) (*preferenceRun, error) {
	switch {
	case c.comm.Size() > 1 && c.lora != nil && r.Adapter.Dropout > 0:
		// the masks are keyed by a row's place in one process's batch,
		// which a rank's rejected rows do not keep
		return nil, r.doc.Errorf("adapter.dropout", "preference pairs on %d ranks take no dropout (TRL's DPOTrainer disables it too); set adapter.dropout: 0", c.comm.Size())
	}
	pl, err := data.NewPairLoader(pairs, c.batch, r.Data.SeqLen, c.tok.PAD(), r.Data.Shuffle, r.Seed)
	if err != nil {
		return nil, inputError(fmt.Errorf("training data: %w", err))
	}
	pr := &preferenceRun{pairs: pl, step: &pref.Step{Objective: o}}
	tg.sequenceLoss = pr.step
	if o.NeedsReference() && c.lora == nil {
		// full fine-tuning trains the weights the reference graph reads:
		// its values are taken now, from the base model, or from the
		// reference cache
		ref := graphOptions{checkpoint: tg.checkpoint, sequenceLogProbs: true, memory: tg.memory, gpu: c.gpu}
		if err := c.referenceValues(r, ref, pairs, val); err != nil {
			return nil, err
		}
	}
	if len(val) > 0 {
		pr.val = pairBatches(val, c.dp.rows, r.Data.SeqLen, c.tok.PAD())
	}
	return pr, nil
}

// preferencePasses builds the preference run's passes beside the training
// graph, over its weights (nn.Builder.Param shares them; on a GPU, the
// training program's very buffers), rows rows of sequences at a time: for
// DPO with an adapter, the reference pass, the same model with the
// adapter switched off; with validation pairs, the policy's pass without
// gradients.
func (c *components) preferencePasses(r *Recipe, o pref.Objective, rows int, tg graphOptions) error {
	pr := c.pref
	var share func(string) *vulkan.Buffer
	if c.trainer.vk != nil {
		share = c.trainer.vk.Param
	}
	var err error
	if o.NeedsReference() && c.lora != nil {
		ref := graphOptions{checkpoint: tg.checkpoint, sequenceLogProbs: true, memory: tg.memory, gpu: c.gpu, share: share}
		if pr.reference, err = buildRunner(c.eng, c.model, nil, rows, r.Data.SeqLen, nil, &c.policy, ref); err != nil {
			return fmt.Errorf("reference pass: %w", err)
		}
	}
	if len(pr.val) > 0 {
		pol := graphOptions{checkpoint: tg.checkpoint, sequenceLogProbs: true, evalOfFullFineTune: c.lora == nil, memory: tg.memory,
			gpu: c.gpu, trained: paramNames(c.params), share: share}
		if pr.policy, err = buildRunner(c.eng, c.model, c.lora, rows, r.Data.SeqLen, nil, &c.policy, pol); err != nil {
			return fmt.Errorf("validation pass: %w", err)
		}
	}
	return nil
}

// evaluate measures the objective on the validation pairs: its loss and
// TRL's metrics over all of them, under TRL's evaluation names (eval_…).
// With several ranks each rank evaluates its contiguous share of the
// batches, and the loss and the metrics' sums are added over the ranks.
func (pr *preferenceRun) evaluate(o pref.Objective, dp *dataParallel) (map[string]float64, error) {
	var norm pref.Norm
	for _, bt := range pr.val {
		norm.Pairs += bt.Pairs
		for i := range bt.Pairs {
			norm.ChosenTokens += bt.Tokens[i]
		}
	}
	var loss float64
	var stats pref.Stats
	lo, hi := shardRows(len(pr.val), dp.size, dp.rank)
	for _, bt := range pr.val[lo:hi] {
		pol, err := pr.policy.logProbs(bt.Batch)
		if err != nil {
			return nil, err
		}
		b := pref.Batch{Tokens: bt.Tokens}
		if b.Reference, err = pr.referenceOf(bt); err != nil {
			return nil, err
		}
		// the batch's real pairs: rows [0, Pairs) and [P, P+Pairs)
		P, n := len(bt.Tokens)/2, bt.Pairs
		keep := func(x []float64) []float64 { return append(append([]float64(nil), x[:n]...), x[P:P+n]...) }
		b.Tokens = append(append([]int(nil), bt.Tokens[:n]...), bt.Tokens[P:P+n]...)
		if b.Reference != nil {
			b.Reference = keep(b.Reference)
		}
		l, st, err := o.Eval(keep(pol), b, norm, make([]float64, 2*n))
		if err != nil {
			return nil, err
		}
		loss += l
		stats.Add(st)
	}
	sums := append([]float64{loss}, stats.Sums()...)
	if err := dp.comm.AllreduceFloat64(sums); err != nil {
		return nil, err
	}
	loss, stats = sums[0], pref.StatsOf(sums[1:])
	out := map[string]float64{"eval_loss": loss}
	for k, v := range stats.Means() {
		out["eval_"+k] = v
	}
	return out, nil
}

// measurePreference evaluates the validation pairs, if any, at a step:
// a metrics.jsonl line, and a line for the console given to say (the
// progress bar's, during the loop).
func (s *session) measurePreference(say func(string)) (map[string]float64, error) {
	pr := s.parts.pref
	if pr == nil || pr.policy == nil {
		return nil, nil
	}
	o, _, _ := s.r.preference()
	m, err := pr.evaluate(o, s.dp)
	if err != nil {
		return nil, fmt.Errorf("preference evaluation: %w", err)
	}
	rec := map[string]any{"step": s.step}
	for k, v := range m {
		rec[k] = v
	}
	s.logger.write(rec)
	say(fmt.Sprintf("step %d validation pairs: loss %.4f, reward accuracy %.1f%%, margin %.4f, logps chosen %.2f rejected %.2f",
		s.step, m["eval_loss"], 100*m["eval_rewards/accuracies"], m["eval_rewards/margins"], m["eval_logps/chosen"], m["eval_logps/rejected"]))
	return m, nil
}

// say prints a line on the console.
func (s *session) say(line string) { fmt.Fprintln(s.out, line) }

// dataState is the training data's position: the pairs' for a preference
// run, else the rows'.
func (s *session) dataState() data.LoaderState {
	if pr := s.parts.pref; pr != nil {
		return pr.pairs.State()
	}
	return s.parts.trainLoader.State()
}

// restoreData moves the training data to a checkpoint's position.
func (s *session) restoreData(st data.LoaderState) error {
	if pr := s.parts.pref; pr != nil {
		return pr.pairs.Restore(st)
	}
	return s.parts.trainLoader.Restore(st)
}

// pairBatches lays pairs out in batches of batch pairs in their order;
// the last batch is filled up with its first pair, and its Pairs counts
// only the pairs it was given.
func pairBatches(pairs []data.Pair, batch, seqLen, padID int) []data.PairBatch {
	var out []data.PairBatch
	for lo := 0; lo < len(pairs); lo += batch {
		ps := make([]data.Pair, batch)
		for i := range ps {
			ps[i] = pairs[lo]
			if lo+i < len(pairs) {
				ps[i] = pairs[lo+i]
			}
		}
		bt := data.BatchPairs(ps, seqLen, padID)
		bt.Pairs = min(batch, len(pairs)-lo)
		out = append(out, bt)
	}
	return out
}

// referenceValues sets every pair's Reference for a full fine-tuning
// run: from the reference cache when every rank finds its entry there,
// else computed by the reference pass (the ranks share the work, so all
// compute or none) and stored. c.reference says which, for the header.
func (c *components) referenceValues(r *Recipe, o graphOptions, pairs, val []data.Pair) error {
	rc := newReferenceCache(r, c, c.dp.rows, pairs, val)
	hit, rejected := rc.load(pairs, val)
	if rejected != nil {
		c.warnings = append(c.warnings, fmt.Sprintf("%v; not used: the reference log-probabilities were computed again", rejected))
	}
	miss, err := dist.AnyTrue(c.comm, !hit)
	if err != nil {
		return err
	}
	if !miss {
		c.reference = "from the cache (" + rc.entry + ")"
		return nil
	}
	pr := &preferenceRun{}
	if pr.reference, err = buildRunner(c.eng, c.model, nil, 2*c.dp.rows, r.Data.SeqLen, nil, &c.policy, o); err != nil {
		return fmt.Errorf("reference pass: %w", err)
	}
	err = errors.Join(pr.precompute(pairs, c.dp, r.Data.SeqLen), pr.precompute(val, c.dp, r.Data.SeqLen))
	pr.reference.close()
	if err != nil {
		return fmt.Errorf("reference log-probabilities: %w", err)
	}
	c.reference = fmt.Sprintf("computed for %d pairs", len(pairs)+len(val))
	if rc.entry != "" {
		rc.store(pairs, val)
		c.reference += ", cached in " + rc.entry
	}
	return nil
}

// precompute runs the reference pass over pairs and stores each pair's
// values in its Reference. The pairs go in batches of a rank's share of
// a micro-batch (dp.rows pairs); with several ranks, each rank runs its
// contiguous share of the batches and every rank gathers them all.
func (pr *preferenceRun) precompute(pairs []data.Pair, dp *dataParallel, seqLen int) error {
	batch := dp.rows
	bts := pairBatches(pairs, batch, seqLen, dp.padID)
	lo, hi := shardRows(len(bts), dp.size, dp.rank)
	var mine []byte
	for i := lo; i < hi; i++ {
		bt := bts[i]
		lp, err := pr.reference.logProbs(bt.Batch)
		if err != nil {
			return err
		}
		for j := range bt.Pairs {
			mine = binary.LittleEndian.AppendUint64(mine, math.Float64bits(lp[j]))
			mine = binary.LittleEndian.AppendUint64(mine, math.Float64bits(lp[batch+j]))
		}
	}
	all, err := dp.comm.Allgather(mine)
	if err != nil {
		return err
	}
	vals := bytes.Join(all, nil)
	if len(vals) != 16*len(pairs) {
		return fmt.Errorf("internal: %d bytes of reference values gathered for %d pairs", len(vals), len(pairs))
	}
	for i := range pairs {
		pairs[i].Reference = []float64{
			math.Float64frombits(binary.LittleEndian.Uint64(vals[16*i:])),
			math.Float64frombits(binary.LittleEndian.Uint64(vals[16*i+8:])),
		}
	}
	return nil
}

// referenceOf is a batch's reference log-probabilities: precomputed, or
// from the reference pass; nil for objectives without a reference.
func (pr *preferenceRun) referenceOf(bt data.PairBatch) ([]float64, error) {
	if bt.Reference != nil || pr.reference == nil {
		return bt.Reference, nil
	}
	ref, err := pr.reference.logProbs(bt.Batch)
	if err != nil {
		return nil, fmt.Errorf("reference pass: %w", err)
	}
	return ref, nil
}
