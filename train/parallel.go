package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/optim"
)

// Data parallelism. Every rank builds the same components from the same
// recipe and draws the same global micro-batches from its own loader, in
// the loader's order: the data order is the global batch's, whatever the
// number of ranks. Rank r computes rows [r·B/N, (r+1)·B/N) of each micro-
// batch of B rows, weighted, as one process weights its micro-batches, by
// its share of the step's target tokens; the ranks' gradients are summed
// (dist.Comm) into every rank's copy, so every rank holds the gradient one
// process would have computed, up to the order of the fp32 additions. The
// step's loss, the overflow check, the clipping norm and the optimizer step
// are then computed on identical data on every rank: a non-finite value on
// any rank is non-finite in the sum, so every rank skips the step together,
// and the replicas stay bit-identical (checked at every checkpoint). Rank 0
// alone writes the run directory.

// dataParallel is one rank's part in data-parallel training.
type dataParallel struct {
	comm       dist.Comm
	rank, size int
	batch      int // rows of a global micro-batch
	lo, hi     int // this rank's rows of every micro-batch
	rows       int // rows of this rank's graphs: the largest share
	seqLen     int
	padID      int

	params []*optim.Param
	flat   []float32 // every trainable's gradient; each param's Grad is a slice of it, in reverse order

	// Reductions during the backward pass (Options.Overlap): the flat
	// buffer is cut into buckets at param boundaries, bucket 0 holding the
	// last params, whose gradients the backward pass finishes first. A
	// bucket is reduced as soon as its gradients are complete, while the
	// pass goes on; buckets start in index order, the same on every rank.
	overlap     bool
	buckets     []bucket
	paramBucket []int
	first, last bool // the micro-batch running is the step's first, last
	fired       int  // hooks called during this micro-batch
	next        int  // the next bucket to start
	pending     []dist.Pending
	hookErr     error
}

type bucket struct {
	lo, hi int // of flat
	params int // params in it
	left   int // params of this step's last micro-batch still to come
}

// shardRows is rank's share of a micro-batch of batch rows among size ranks.
func shardRows(batch, size, rank int) (lo, hi int) {
	return rank * batch / size, (rank + 1) * batch / size
}

// defaultBucketBytes is the gradient bytes of one overlapped reduction:
// large enough that a call's latency (tens of µs on one host, a few on
// InfiniBand) is small against its transfer, small enough that the
// first bucket is ready early in the backward pass.
const defaultBucketBytes = 4 << 20

// newDataParallel prepares a rank's part: its rows, and one flat gradient
// buffer that the params' gradients become slices of (allocated once and
// kept: one reduction call for all of them, and a buffer an RDMA
// registration cache can keep registered). A process training alone
// (c.Size() 1) has every row, and sums nothing: its gradients stay where
// they are, and it overlaps nothing.
func newDataParallel(c dist.Comm, batch, seqLen, padID int, params []*optim.Param, overlap bool, bucketBytes int) *dataParallel {
	dp := &dataParallel{comm: c, rank: c.Rank(), size: c.Size(), batch: batch, seqLen: seqLen, padID: padID,
		params: params, overlap: overlap && c.Size() > 1}
	dp.lo, dp.hi = shardRows(batch, dp.size, dp.rank)
	dp.rows = (batch + dp.size - 1) / dp.size
	if dp.size == 1 {
		return dp
	}
	n := 0
	for _, p := range params {
		n += len(p.Grad)
	}
	dp.flat = make([]float32, n)
	if bucketBytes <= 0 {
		bucketBytes = defaultBucketBytes
	}
	dp.paramBucket = make([]int, len(params))
	off := 0
	for i := len(params) - 1; i >= 0; i-- {
		p := params[i]
		g := dp.flat[off : off+len(p.Grad) : off+len(p.Grad)]
		copy(g, p.Grad)
		p.Grad = g
		if len(dp.buckets) == 0 || 4*(dp.buckets[len(dp.buckets)-1].hi-dp.buckets[len(dp.buckets)-1].lo) >= bucketBytes {
			dp.buckets = append(dp.buckets, bucket{lo: off, hi: off})
		}
		b := &dp.buckets[len(dp.buckets)-1]
		b.hi += len(g)
		b.params++
		dp.paramBucket[i] = len(dp.buckets) - 1
		off += len(g)
	}
	return dp
}

// shard is this rank's rows of a global micro-batch, as a batch of
// dp.rows rows: a rank with a smaller share fills the rest with padding
// rows (no targets), which add nothing to the loss or the gradients.
func (dp *dataParallel) shard(bt data.Batch) data.Batch {
	L := bt.SeqLen
	out := data.Batch{Rows: dp.rows, SeqLen: L, Inputs: make([]int, dp.rows*L), Targets: make([]int, dp.rows*L), Positions: make([]int, dp.rows*L)}
	n := (dp.hi - dp.lo) * L
	copy(out.Inputs, bt.Inputs[dp.lo*L:dp.hi*L])
	copy(out.Targets, bt.Targets[dp.lo*L:dp.hi*L])
	if bt.Positions != nil {
		copy(out.Positions, bt.Positions[dp.lo*L:dp.hi*L])
	} else {
		rowPositions(out.Positions[:n], L)
	}
	rowPositions(out.Positions[n:], L) // padding rows: a document each
	for i := n; i < len(out.Inputs); i++ {
		out.Inputs[i], out.Targets[i] = dp.padID, data.IgnoreIndex
	}
	for _, t := range out.Targets[:n] {
		if t != data.IgnoreIndex {
			out.NumTargets++
		}
	}
	return out
}

// pairShard is this rank's pairs of a global micro-batch of pairs (a
// preference run's dataParallel counts pairs, not rows), as a batch of
// dp.rows pairs: chosen rows then rejected rows, as data.BatchPairs lays
// them out, so a pair's two sequences are always on the same rank. A
// rank with a smaller share fills the rest with padding pairs (no
// targets), which pref.Step leaves out; it returns their number.
func (dp *dataParallel) pairShard(bt data.PairBatch) (data.PairBatch, int) {
	if dp.size == 1 {
		return bt, 0
	}
	P, R, n, L := bt.Pairs, dp.rows, dp.hi-dp.lo, bt.SeqLen
	out := data.PairBatch{Pairs: n, Tokens: make([]int, 2*R)}
	out.Rows, out.SeqLen = 2*R, L
	out.Inputs, out.Targets, out.Positions = make([]int, 2*R*L), make([]int, 2*R*L), make([]int, 2*R*L)
	if bt.Reference != nil {
		out.Reference = make([]float64, 2*R)
	}
	for half := range 2 {
		src, dst := half*P+dp.lo, half*R // first rows: the pairs' chosen, then their rejected
		copy(out.Inputs[dst*L:(dst+n)*L], bt.Inputs[src*L:(src+n)*L])
		copy(out.Targets[dst*L:(dst+n)*L], bt.Targets[src*L:(src+n)*L])
		copy(out.Positions[dst*L:(dst+n)*L], bt.Positions[src*L:(src+n)*L])
		copy(out.Tokens[dst:dst+n], bt.Tokens[src:src+n])
		if bt.Reference != nil {
			copy(out.Reference[dst:dst+n], bt.Reference[src:src+n])
		}
		pad := (dst + n) * L
		rowPositions(out.Positions[pad:(dst+R)*L], L)
		for i := pad; i < (dst+R)*L; i++ {
			out.Inputs[i], out.Targets[i] = dp.padID, data.IgnoreIndex
		}
		for _, t := range out.Tokens[dst : dst+n] {
			out.NumTargets += t
			if half == 0 {
				out.ChosenTokens += t
			}
		}
	}
	return out, R - n
}

// tap is the runner's gradient tap with overlap: each param's hook
// accumulates its micro-batch gradient into the param (as runner.run does
// without taps) and, in the step's last micro-batch, counts down its
// bucket. Hooks run one at a time, on the goroutine running the graph.
func (dp *dataParallel) tap(names map[string]int) func(string) func([]float32) {
	return func(name string) func([]float32) {
		i, ok := names[name]
		if !ok {
			return nil
		}
		p := dp.params[i]
		return func(g []float32) {
			dp.fired++
			accumulate(p.Grad, g, dp.first)
			if !dp.last {
				return
			}
			b := &dp.buckets[dp.paramBucket[i]]
			b.left--
			for dp.next < len(dp.buckets) && dp.buckets[dp.next].left == 0 {
				nb := dp.buckets[dp.next]
				dp.pending[dp.next] = dp.comm.StartAllreduceFloat32(dp.flat[nb.lo:nb.hi])
				dp.next++
			}
		}
	}
}

// beforeMicro readies the hooks for micro-batch i of n.
func (dp *dataParallel) beforeMicro(i, n int) {
	dp.first, dp.last, dp.fired = i == 0, i == n-1, 0
	if dp.last && dp.overlap {
		dp.next = 0
		dp.pending = make([]dist.Pending, len(dp.buckets))
		for b := range dp.buckets {
			dp.buckets[b].left = dp.buckets[b].params
		}
	}
}

// commTimes are a step's reduction times: wait is how long the step
// waited for its gradient reductions after the last backward pass (the
// part not hidden behind compute), busy how long they took in all.
type commTimes struct{ wait, busy time.Duration }

// reduce sums the step's gradients and scalars over the ranks. tapped says
// the hooks have been accumulating (and, with overlap, reducing) the
// gradients. It reports how long the sums took; nil for one process, which
// has nothing to sum.
func (dp *dataParallel) reduce(tapped bool, scalars []float64) (*commTimes, error) {
	if dp.size == 1 {
		return nil, nil
	}
	ct := &commTimes{}
	t := time.Now()
	if tapped && dp.overlap {
		if dp.next != len(dp.buckets) {
			return ct, fmt.Errorf("internal: %d of %d gradient buckets were complete after the backward pass", dp.next, len(dp.buckets))
		}
		var err error
		for _, p := range dp.pending {
			if e := p.Wait(); e != nil && err == nil {
				err = e
			}
			ct.busy += p.Busy()
		}
		if err != nil {
			return ct, fmt.Errorf("reduce gradients: %w", err)
		}
	} else {
		if err := dp.comm.AllreduceFloat32(dp.flat); err != nil {
			return ct, fmt.Errorf("reduce gradients: %w", err)
		}
		ct.busy = time.Since(t)
	}
	ct.wait = time.Since(t)
	if err := dp.comm.AllreduceFloat64(scalars); err != nil {
		return ct, fmt.Errorf("reduce the loss: %w", err)
	}
	return ct, nil
}

// ----- the session's distributed steps -----

func (s *session) rank0() bool { return s.dp.rank == 0 }

// agreeSetup makes every rank learn whether every rank built its
// components, and refuses ranks started with different binaries, recipes,
// data or models: they would train different things.
func agreeSetup(c dist.Comm, s *session, err error) error {
	if c == nil || c.Size() == 1 {
		return err
	}
	if err := agreeInterrupted(c, err); err != nil {
		return err
	}
	mine := s.fingerprint()
	b, _ := json.Marshal(mine)
	all, err := c.Allgather(b)
	if err != nil {
		return err
	}
	var diffs []string
	hosts := c.Info().Hosts
	var root map[string]string
	json.Unmarshal(all[0], &root)
	for r := 1; r < len(all); r++ {
		var fp map[string]string
		if json.Unmarshal(all[r], &fp) != nil {
			diffs = append(diffs, fmt.Sprintf("rank %d on %s sent an unreadable fingerprint (another mixtune version?)", r, hosts[r]))
			continue
		}
		for _, k := range sortedKeys(root) {
			if fp[k] != root[k] {
				diffs = append(diffs, fmt.Sprintf("rank %d on %s has another %s than rank 0 on %s (%s vs %s)", r, hosts[r], k, hosts[0], short(fp[k]), short(root[k])))
			}
		}
	}
	if len(diffs) > 0 {
		err := inputError(fmt.Errorf("the ranks were not started alike, and would train different things: %s", strings.Join(diffs, "; ")))
		return &dist.JobError{Msg: err.Error(), Err: err, Quiet: c.Rank() != 0} // every rank found it; rank 0 says so
	}
	return nil
}

func short(s string) string {
	if len(s) > 16 {
		return s[:16]
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// fingerprint identifies what this rank would train: the binary, the
// recipe, the tokens of the data, the model's weights (sampled: a few
// thousand values of each tensor) and the world the ranks were told of.
func (s *session) fingerprint() map[string]string {
	p := s.parts
	fp := map[string]string{
		"mixtune binary":  Version + " " + executableHash(),
		"recipe":          s.r.Hash(),
		"training data":   fmt.Sprintf("%016x", p.trainLoader.State().Fingerprint),
		"validation data": batchesHash(p.valBatches),
		"base model":      modelSample(p.model),
		"world":           fmt.Sprintf("%d ranks, %s", s.dp.size, s.dp.comm.Info().Launcher),
	}
	if p.task != nil {
		h := fnv.New64a()
		for i, pr := range p.task.prompts {
			fmt.Fprint(h, pr, p.task.wants[i])
		}
		fp["task"] = fmt.Sprintf("%016x", h.Sum64())
	}
	return fp
}

var exeHash = sync.OnceValue(func() string {
	path, err := os.Executable()
	if err != nil {
		return "unknown"
	}
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unknown"
	}
	return hex.EncodeToString(h.Sum(nil))
})

func executableHash() string { return exeHash() }

func batchesHash(bs []data.Batch) string {
	h := fnv.New64a()
	var buf [8]byte
	for _, b := range bs {
		for i := range b.Inputs {
			binary.LittleEndian.PutUint64(buf[:], uint64(b.Inputs[i])<<32|uint64(uint32(b.Targets[i])))
			h.Write(buf[:])
		}
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// modelSample hashes each weight's name, shape and about 4096 of its
// values, evenly spread: cheap for any model size, and a different
// checkpoint, dtype or architecture differs.
func modelSample(m *model.Model) string {
	h := fnv.New64a()
	var buf [4]byte
	for _, name := range sortedKeys(m.Weights) {
		w := m.Weights[name]
		fmt.Fprint(h, name, w.Shape)
		if w.Q4 != nil { // a 4-bit weight: its blob (codes and scales)
			for i := 0; i < len(w.Q4); i += max(1, len(w.Q4)/4096) {
				h.Write(w.Q4[i : i+1])
			}
			continue
		}
		if w.Bits != nil {
			for i := 0; i < len(w.Bits); i += max(1, len(w.Bits)/4096) {
				binary.LittleEndian.PutUint16(buf[:2], w.Bits[i])
				h.Write(buf[:2])
			}
			continue
		}
		for i := 0; i < len(w.Data); i += max(1, len(w.Data)/4096) {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(w.Data[i]))
			h.Write(buf[:])
		}
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// rootState is what rank 0 tells the other ranks after opening the run
// directory: where it is, and on resume the state it restored.
type rootState struct {
	Dir          string          `json:"dir"`
	Complete     *Summary        `json:"complete,omitempty"`
	Resumed      bool            `json:"resumed"`
	CheckpointAt string          `json:"checkpoint_dir,omitempty"`
	Checkpointed int             `json:"checkpointed"`
	State        checkpointState `json:"state"`
	Optim        []tensorShape   `json:"optim"`
}

type tensorShape struct {
	Name string `json:"name"`
	Len  int    `json:"len"`
}

// openShared opens the run directory on rank 0 and hands every other rank
// what it needs: the directory's name and, on resume, the restored
// weights, optimizer state, data position and loss scale. A process
// training alone has no one to hand them to.
func (s *session) openShared() error {
	var err error
	if s.rank0() {
		err = s.openRunDir()
	}
	if s.dp.size == 1 {
		return err
	}
	if err := dist.Agree(s.dp.comm, err); err != nil {
		return err
	}
	rs, ostate, err := s.shareRootState()
	switch {
	case err != nil:
		return err
	case rs.Complete != nil:
		return nil
	case !rs.Resumed:
		return s.checkReplicas("start")
	}
	if err := s.shareRestored(rs, ostate); err != nil {
		return err
	}
	return s.checkReplicas("resume")
}

// shareRootState broadcasts rank 0's view of the run directory (and, on
// resume, the shapes of its optimizer state, returned on rank 0 with the
// state itself).
func (s *session) shareRootState() (rootState, map[string][]float32, error) {
	var rs rootState
	var ostate map[string][]float32
	if s.rank0() {
		rs = rootState{Dir: s.dir, Complete: s.complete, Resumed: s.ck != nil, Checkpointed: s.checkpointed}
		if s.ck != nil && s.complete == nil {
			rs.CheckpointAt = s.ck.Dir
			rs.State = s.stateNow()
			ost := s.parts.optimizer.State()
			rs.State.OptimStep, rs.State.OptimScalars = ost.Step, ost.Scalars
			ostate = ost.Tensors
			for _, name := range sortedKeys(ostate) {
				rs.Optim = append(rs.Optim, tensorShape{name, len(ostate[name])})
			}
		}
	}
	if err := bcastJSON(s.dp.comm, &rs); err != nil {
		return rs, nil, err
	}
	if !s.rank0() {
		s.dir = rs.Dir
		s.complete = rs.Complete
		s.checkpointed = rs.Checkpointed
	}
	return rs, ostate, nil
}

// shareRestored gives every rank rank 0's restored state, bit for bit:
// optimizer tensors and trainable weights broadcast, the rest from rs.
func (s *session) shareRestored(rs rootState, ostate map[string][]float32) error {
	c, p := s.dp.comm, s.parts
	if !s.rank0() {
		ostate = map[string][]float32{}
		for _, t := range rs.Optim {
			ostate[t.Name] = make([]float32, t.Len)
		}
	}
	for _, t := range rs.Optim {
		if err := c.BcastFloat32(ostate[t.Name], 0); err != nil {
			return err
		}
	}
	for _, prm := range p.params {
		if err := c.BcastFloat32(prm.Value, 0); err != nil {
			return err
		}
	}
	p.eng.WeightsChanged() // a GPU engine uploads them
	if s.rank0() {
		return nil
	}
	st := rs.State
	s.ck = &loadedCheckpoint{Dir: rs.CheckpointAt, State: st}
	return s.restoreLoop(st, optim.State{Step: st.OptimStep, Scalars: st.OptimScalars, Tensors: ostate}, "resume: rank 0's state")
}

// bcastJSON sends rank 0's v to every rank.
func bcastJSON(c dist.Comm, v any) error {
	var b []byte
	if c.Rank() == 0 {
		var err error
		if b, err = json.Marshal(v); err != nil {
			return err
		}
	}
	n := make([]byte, 8)
	binary.LittleEndian.PutUint64(n, uint64(len(b)))
	if err := c.Bcast(n, 0); err != nil {
		return err
	}
	if c.Rank() != 0 {
		b = make([]byte, binary.LittleEndian.Uint64(n))
	}
	if len(b) > 0 {
		if err := c.Bcast(b, 0); err != nil {
			return err
		}
	}
	if c.Rank() == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// checkReplicas compares the ranks' trainable weights, which the summed
// gradients keep bit-identical; a difference means the sums were not the
// same bits everywhere, and the ranks are training different models.
func (s *session) checkReplicas(when string) error {
	if s.dp.size == 1 {
		return nil // one replica
	}
	h := fnv.New64a()
	buf := make([]byte, 0, 1<<16)
	for _, p := range s.parts.params {
		for _, v := range p.Value {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			if len(buf) == cap(buf) {
				h.Write(buf)
				buf = buf[:0]
			}
		}
	}
	h.Write(buf)
	mine := binary.LittleEndian.AppendUint64(nil, h.Sum64())
	all, err := s.dp.comm.Allgather(mine)
	if err != nil {
		return err
	}
	var bad []string
	for r, a := range all {
		if !bytes.Equal(a, all[0]) {
			bad = append(bad, fmt.Sprint(r))
		}
	}
	if len(bad) > 0 { // every rank sees every hash, so every rank fails here
		err := fmt.Errorf("%s: the trainable weights of rank(s) %s differ from rank 0's: the ranks' gradient sums were not the same bits (an MPI whose reduction differs between ranks?); rerun with --allreduce ordered", when, strings.Join(bad, ", "))
		return &dist.JobError{Msg: err.Error(), Err: err, Quiet: s.dp.rank != 0}
	}
	return nil
}

// everyRank marks a failure that every rank meets at the same point, from
// the same summed values (a diverged loss): the ranks end together, and
// rank 0 alone reports it.
func (s *session) everyRank(err error) error {
	return &dist.JobError{Msg: err.Error(), Err: err, Quiet: s.dp.rank != 0}
}

// interrupted is whether to stop before the next step: a signal reached
// this process or, with several ranks, any of them; every rank stops after
// the same step.
func (s *session) interrupted(ctx interface{ Err() error }) (bool, error) {
	return dist.AnyTrue(s.dp.comm, ctx.Err() != nil)
}

// agreeInterrupted is err on every rank, as dist.Agree makes it, except
// that when any rank was interrupted every rank returns ErrInterrupted:
// an interrupt is not a failure to report, and every rank must stop
// alike.
func agreeInterrupted(c dist.Comm, err error) error {
	if c == nil || c.Size() == 1 {
		return err
	}
	stop, aerr := dist.AnyTrue(c, errors.Is(err, ErrInterrupted))
	switch {
	case aerr != nil:
		return aerr
	case stop:
		return ErrInterrupted
	}
	return dist.Agree(c, err)
}

// validationLoss is the mean loss per target token of the validation
// batches, over every rank's rows of them: each rank sums its rows' loss,
// the sums and the token counts are added over the ranks. Cancelling ctx
// (on any rank) stops it before the next batch with ErrInterrupted.
func (s *session) validationLoss(ctx context.Context) (LossReport, error) {
	p := s.parts
	// every rank runs every batch, so every rank asks at each one
	stop := func() error {
		stop, err := s.interrupted(ctx)
		if err == nil && stop {
			err = ErrInterrupted
		}
		return err
	}
	sum, n, err := sumLosses(p.evaluator, p.valBatches, s.dp.shard, stop)
	if err != nil {
		return LossReport{}, err
	}
	x := []float64{sum, float64(n)}
	if err := s.dp.comm.AllreduceFloat64(x); err != nil {
		return LossReport{}, err
	}
	return lossReport(x[0], int(x[1]), len(p.valBatches))
}

// taskReport is the task accuracy, each rank answering its share of the
// questions (rank r the r-th of N contiguous slices); the counts are
// added and the first samples kept, as one process would have them.
// Cancelling ctx stops a rank before its next token; every rank then
// returns ErrInterrupted.
func (s *session) taskReport(ctx context.Context) (TaskReport, error) {
	all := s.parts.task
	lo, hi := shardRows(len(all.prompts), s.dp.size, s.dp.rank)
	rep, err := TaskReport{}, error(nil)
	if hi > lo {
		rep, err = s.taskAccuracy(ctx, &taskSet{prompts: all.prompts[lo:hi], wants: all.wants[lo:hi]})
	}
	if err = agreeInterrupted(s.dp.comm, err); err != nil {
		return TaskReport{}, err
	}
	b, _ := json.Marshal(rep)
	parts, err := s.dp.comm.Allgather(b)
	if err != nil {
		return TaskReport{}, err
	}
	var out TaskReport
	for _, pb := range parts {
		var r TaskReport
		if err := json.Unmarshal(pb, &r); err != nil {
			return TaskReport{}, err
		}
		if out.Engine == "" {
			out.Engine = r.Engine
		}
		out.Correct += r.Correct
		out.Total += r.Total
		for _, a := range r.Samples {
			if len(out.Samples) < 3 {
				out.Samples = append(out.Samples, a)
			}
		}
	}
	out.Accuracy = float64(out.Correct) / float64(max(out.Total, 1))
	return out, nil
}

// addWorld records the ranks in run.json.
func (m *Manifest) addWorld(c dist.Comm) {
	info := c.Info()
	m.Launcher, m.WorldSize, m.Reduction, m.MPI = info.Launcher, c.Size(), info.Reduction, info.Library
	for r, h := range info.Hosts {
		m.Ranks = append(m.Ranks, RankInfo{Rank: r, Host: h})
	}
}

// RankInfo is one rank of a data-parallel run, in run.json.
type RankInfo struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
}

// rankCompute is the compute section a rank uses: without a thread count
// in the recipe, the host's cores are shared among the ranks on it
// (runtime.NumCPU already counts only the cores a rank is bound to).
func rankCompute(c ComputeConfig, comm dist.Comm) ComputeConfig {
	if c.Threads <= 0 && comm != nil && comm.Size() > 1 {
		c.Threads = max(1, runtime.NumCPU()/dist.LocalSize(comm))
	}
	return c
}

// rowsPerRank is the rows of one rank's graphs for micro-batches of batch rows.
func rowsPerRank(batch int, comm dist.Comm) int {
	if comm == nil || comm.Size() <= 1 {
		return batch
	}
	return (batch + comm.Size() - 1) / comm.Size()
}

func paramIndex(ps []*optim.Param) map[string]int {
	m := make(map[string]int, len(ps))
	for i, p := range ps {
		m[p.Name] = i
	}
	return m
}
