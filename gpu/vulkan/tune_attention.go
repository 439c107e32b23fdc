package vulkan

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
)

// Choosing by measurement whether the tensor-core attention's dK/dV
// kernel runs as one dispatch or as two (compute.split_dkv: auto).
//
// The joint kernel holds both accumulators (149 registers an invocation
// on an H100, so an SM held one of its workgroups); split, each kernel
// holds one set and reads the kept scores again. Which is faster is the
// device's to say. Both compute every value the same way, so the choice
// changes no bit of a run: it needs no record for a resume, and ranks may
// choose apart.

// AttentionUse is an attention shape whose backward pass, with dK and dV
// both wanted, a step runs Count times.
type AttentionUse struct {
	Shape AttentionShape
	Count int
}

// AddAttention counts one backward pass of s into uses. Its documents
// (Positions) are left out: they only take work away from both forms.
func AddAttention(uses []AttentionUse, s AttentionShape) []AttentionUse {
	s.Positions = nil
	for i := range uses {
		if uses[i].Shape == s {
			uses[i].Count++
			return uses
		}
	}
	return append(uses, AttentionUse{Shape: s, Count: 1})
}

func (s AttentionShape) String() string {
	return fmt.Sprintf("attention B%d T%d H%d/%d D%d window %d %v/%v/%v/%v", s.Batch, s.SeqLen, s.Heads, s.KVHeads, s.HeadDim, s.Window, s.Scores, s.Softmax, s.Values, s.Operands)
}

// SplitChoice is what ChooseSplitDKV put in use and why.
type SplitChoice struct {
	Split    bool
	Reason   string       // "" where no backward pass runs on the tensor-core kernels
	Timings  []TileTiming // "joint" and "split", fastest first; nil where nothing was timed
	Warnings []string
}

// ChooseSplitDKV times the tensor-core attention's backward pass with the
// dK/dV kernel joint and split at uses (those that run on tensor cores),
// each weighted by its count, or reads the times from the cache opt says,
// and keeps the faster (the joint kernel on a tie).
func (ks *Kernels) ChooseSplitDKV(uses []AttentionUse, opt TuneOptions) (SplitChoice, error) {
	var tuned []AttentionUse
	for _, u := range uses {
		if u.Count > 0 && ks.attnTensorFor(u.Shape) {
			tuned = append(tuned, u)
		}
	}
	if len(tuned) == 0 {
		return SplitChoice{Split: ks.splitDKV}, nil
	}
	fields, err := ks.splitKey(tuned)
	if err != nil {
		return SplitChoice{}, err
	}
	check := func(c *tileCalibration) error {
		for _, name := range []string{"joint", "split"} {
			if !c.has(name) {
				return fmt.Errorf("has no result for the %s kernel", name)
			}
		}
		return nil
	}
	cal, source, warnings, err := calibrated("dK/dV split", "split-", fields, opt, check, func(skip map[string]string, trying func(string)) ([]TileTiming, error) {
		return ks.timeSplit(tuned, cmp.Or(opt.maxBatch, tuneBatchMax), skip, trying)
	})
	if err != nil {
		return SplitChoice{}, err
	}
	best, ok := pickTile(cal.Results)
	if !ok {
		return SplitChoice{Split: ks.splitDKV, Reason: "the backward pass could not be timed", Timings: sortedTimings(cal.Results), Warnings: append(warnings, fmt.Sprintf("attention's backward pass could not be timed (%+v)", cal.Results))}, nil
	}
	ks.splitDKV = best.Tile == "split"
	sorted := sortedTimings(cal.Results)
	parts := ""
	for i, t := range sorted {
		if i > 0 {
			parts += ", "
		}
		parts += fmt.Sprintf("%s %.3g", t.Tile, t.Millis)
	}
	reason := fmt.Sprintf("auto → %s: %s ms a step of attention's backward pass (%d shapes), measured %s, %s",
		best.Tile, parts, len(tuned), cal.Measured.UTC().Format("2006-01-02 15:04 UTC"), source)
	return SplitChoice{Split: ks.splitDKV, Reason: reason, Timings: sorted, Warnings: warnings}, nil
}

// deviceFields describe the device and driver a calibration ran on.
func (ks *Kernels) deviceFields() []string {
	p := ks.d.Physical
	return []string{
		fmt.Sprintf("device %s (%04x:%04x)", p.Name, p.VendorID, p.DeviceID),
		fmt.Sprintf("driver %s %s %s", p.DriverName, p.DriverVersionString(), p.DriverInfo),
		"vulkan " + p.VersionString(),
	}
}

// splitKey is what the split's calibration depends on: the device, the
// kernels each shape runs (their SPIR-V hashed), whether scores are kept,
// and the shapes.
func (ks *Kernels) splitKey(uses []AttentionUse) ([]string, error) {
	fields := append([]string{"split calibration " + strconv.Itoa(tuneVersion)}, ks.deviceFields()...)
	fields = append(fields, "kept scores up to "+strconv.FormatUint(ks.attnKeepMax, 10))
	for _, u := range uses {
		h := sha256.New()
		for _, pass := range []string{"dq", "dkv", "dk", "dv"} {
			code, err := spirv(ks.attentionFile(u.Shape, pass))
			if err != nil {
				return nil, err
			}
			h.Write(code)
		}
		fields = append(fields, fmt.Sprintf("%v ×%d kernels %s", u.Shape, u.Count, hex.EncodeToString(h.Sum(nil)[:8])))
	}
	return fields, nil
}

// timeSplit times the backward pass at each use, joint and split taking
// turns, tuneRounds rounds, the best counting.
func (ks *Kernels) timeSplit(uses []AttentionUse, maxBatch int, skip map[string]string, trying func(string)) ([]TileTiming, error) {
	was := ks.splitDKV
	defer func() { ks.splitDKV = was }()
	var bufs []*Buffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	filled := func(n int) (*Buffer, error) {
		b, err := ks.d.NewBuffer(4 * max(n, 1))
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, b)
		xs := make([]float32, max(n, 1))
		for i := range xs {
			xs[i] = (float32(i*7919%13) - 6) / 8 // exact in both 16-bit formats
		}
		return b, b.WriteFloat32(0, xs)
	}
	bt, err := newBatchTimer(ks.d)
	if err != nil {
		return nil, err
	}
	defer bt.close()
	r := bt.r
	modes := []string{"joint", "split"}
	best := infinities(len(modes), len(uses)) // [mode][use] seconds a pass
	type operands struct{ q, k, v, dO, stats, out, rowSum, dq, dk, dv, heads *Buffer }
	ops := make([]operands, len(uses))
	for j, u := range uses {
		s := u.Shape
		qn, kn := s.Batch*s.SeqLen*s.Heads*s.HeadDim, s.Batch*s.SeqLen*s.KVHeads*s.HeadDim
		o := &ops[j]
		for _, b := range []struct {
			dst **Buffer
			n   int
		}{{&o.q, qn}, {&o.k, kn}, {&o.v, kn}, {&o.dO, qn}, {&o.stats, s.StatsLen()}, {&o.out, qn}, {&o.rowSum, s.RowSumLen()},
			{&o.dq, qn}, {&o.dk, kn}, {&o.dv, kn}, {&o.heads, s.HeadGradsLen()}} {
			if *b.dst, err = filled(b.n); err != nil {
				return nil, err
			}
		}
		// the stats the backward pass reads
		if err := ks.AttentionForward(r, s, o.q, o.k, o.v, o.stats, o.out, s.Operands); err == nil {
			err = r.Submit()
		}
		if err != nil {
			return nil, err
		}
	}
	for round := 0; round < tuneRounds; round++ {
		for j, u := range uses {
			s, o := u.Shape, ops[j]
			f := s.Operands
			grouped := s.Heads > s.KVHeads
			g := AttentionGrads{DO: o.dO, RowSum: o.rowSum, HeadGrads: o.heads, DQ: o.dq, DK: o.dk, DV: o.dv,
				DQRound: f, DKRound: f, DVRound: f, RoundHeadsK: grouped, RoundHeadsV: grouped}
			if s.HeadGradsLen() == 0 {
				g.HeadGrads = nil
			}
			pairs := float64(s.Batch*s.Heads) * float64(s.SeqLen) * float64(s.SeqLen+1) / 2
			flops := 9 * 2 * float64(s.HeadDim) * pairs
			n := int(math.Max(1, math.Min(float64(maxBatch), math.Round(tuneBatchFlops/4/flops))))
			for i, mode := range modes {
				if _, ok := skip[mode]; ok {
					continue
				}
				trying(mode)
				ks.splitDKV = mode == "split"
				secs, err := bt.time(round == 0, n, func(r *Recorder) error { return ks.AttentionBackward(r, s, o.q, o.k, o.v, o.stats, g) })
				if err != nil {
					return nil, err
				}
				best[i][j] = min(best[i][j], secs)
			}
		}
	}
	timings := make([]TileTiming, len(modes))
	for i, mode := range modes {
		timings[i] = TileTiming{Tile: mode}
		if reason, ok := skip[mode]; ok {
			timings[i].Error = reason
			continue
		}
		var secs, flops float64
		for j, u := range uses {
			s := u.Shape
			timings[i].PerProduct = append(timings[i].PerProduct, best[i][j]*1e3)
			secs += float64(u.Count) * best[i][j]
			flops += float64(u.Count) * 9 * 2 * float64(s.HeadDim) * float64(s.Batch*s.Heads) * float64(s.SeqLen) * float64(s.SeqLen+1) / 2
		}
		timings[i].Millis, timings[i].TFLOPS = secs*1e3, flops/secs/1e12
	}
	return timings, nil
}
