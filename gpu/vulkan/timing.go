package vulkan

import (
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// ErrNoTimestamps is returned by Recorder.Time on a device whose compute
// queue writes no timestamps (its family's timestampValidBits is 0).
var ErrNoTimestamps = errors.New("vulkan: the compute queue writes no timestamps (timestampValidBits is 0)")

// queriesPerPool is how many timestamps one query pool holds; a timed
// Recorder adds pools as a batch needs them (two per command, two per batch).
const queriesPerPool = 1024

// Scope is what the commands recorded next belong to, for a timed
// Recorder: the graph node that lowered them (vkengine sets it per node),
// or a caller's label (the optimizer's step). It is cleared after every batch.
type Scope struct {
	Kind   string // the node's op kind (nn.OpSpec.Kind), or a label
	NodeID int    // the graph node's id (meaningful where Node is not empty)
	Node   string // the graph node's name; "" for commands outside a graph
}

// CommandTime is the GPU time of one recorded command.
type CommandTime struct {
	Kernel string // the kernel's name, or "copy" for a buffer copy
	Scope  Scope
	// Flops is the floating-point operations the command does where its
	// recorder knows them (a GEMM's 2·M·N·K), else 0.
	Flops float64
	// Nanos runs from when every command before it had finished (the
	// barrier between them included) to when it finished.
	Nanos float64
}

// BatchTime is the timing of one submitted batch.
type BatchTime struct {
	// Nanos is the command buffer's GPU time: from its first timestamp,
	// written when the GPU starts it, to its last, after its final
	// barrier. The commands' times lie inside it without overlapping, so
	// their sum is at most Nanos.
	Nanos    float64
	Commands []CommandTime
}

// timer is a Recorder's timestamp state while timing is on.
type timer struct {
	sink   func(BatchTime)
	pools  []ndHandle
	used   int // queries written in this batch
	period float64
	mask   uint64
	cmds   []CommandTime
}

// Time turns timing on (sink not nil) or off (nil). While it is on, each
// batch writes a timestamp when it starts and ends and around every
// command, and Submit hands the batch's times to sink after the fence.
// Off, the Recorder records no query commands at all. Time may not be
// called while a batch is being recorded.
func (r *Recorder) Time(sink func(BatchTime)) error {
	if r.recording || r.flushed > 0 {
		return fmt.Errorf("vulkan: Time: a batch is being recorded")
	}
	if sink == nil {
		r.stopTiming()
		return nil
	}
	bits := r.d.timestampBits
	if bits == 0 {
		return fmt.Errorf("%w on %s", ErrNoTimestamps, r.d.Physical.Name)
	}
	if !(r.d.Physical.TimestampPeriod > 0) {
		return fmt.Errorf("vulkan: Time: %s reports a timestamp period of %v ns", r.d.Physical.Name, r.d.Physical.TimestampPeriod)
	}
	if r.timing == nil {
		r.timing = &timer{}
	}
	t := r.timing
	t.sink, t.period, t.mask = sink, float64(r.d.Physical.TimestampPeriod), math.MaxUint64
	if bits < 64 {
		t.mask = 1<<bits - 1
	}
	return nil
}

// SetScope labels the commands recorded next (see Scope).
func (r *Recorder) SetScope(s Scope) { r.scope = s }

func (r *Recorder) stopTiming() {
	if r.timing == nil {
		return
	}
	for _, p := range r.timing.pools {
		call(r.d.fn.destroyQueryPool, r.d.h, uintptr(p), 0)
	}
	r.timing = nil
}

// stamp records a timestamp write at stage into the batch's next query,
// resetting each pool before its first use in the batch.
func (r *Recorder) stamp(stage uint32) error {
	t, f := r.timing, &r.d.fn
	pool, q := t.used/queriesPerPool, t.used%queriesPerPool
	if pool == len(t.pools) {
		ci := &queryPoolCreateInfo{SType: stQueryPoolCreateInfo, QueryType: queryTypeTimestamp, QueryCount: queriesPerPool}
		var h ndHandle
		if err := check("vkCreateQueryPool", call(f.createQueryPool, r.d.h, uintptr(unsafe.Pointer(ci)), 0, uintptr(unsafe.Pointer(&h)))); err != nil {
			return fmt.Errorf("vulkan: %w", err)
		}
		t.pools = append(t.pools, h)
	}
	if q == 0 {
		call(f.cmdResetQueryPool, r.cb, uintptr(t.pools[pool]), 0, queriesPerPool)
	}
	call(f.cmdWriteTimestamp, r.cb, uintptr(stage), uintptr(t.pools[pool]), uintptr(q))
	t.used++
	r.stamps++
	return nil
}

// timeCommand records the timestamps around one command: the one before
// it is written once every earlier command has finished, the one after
// once it has, so that commands' intervals never overlap.
func (r *Recorder) timeCommand(kernel string, flops float64, record func()) error {
	if r.timing == nil {
		record()
		return nil
	}
	if err := r.stamp(pipelineStageBottomOfPipe); err != nil {
		return err
	}
	record()
	if err := r.stamp(pipelineStageBottomOfPipe); err != nil {
		return err
	}
	r.timing.cmds = append(r.timing.cmds, CommandTime{Kernel: kernel, Scope: r.scope, Flops: flops})
	return nil
}

// readTimes reads the batch's timestamps (after its fence) and hands the
// times to the sink. Query i of the batch is in pool i/queriesPerPool.
func (r *Recorder) readTimes() error {
	t := r.timing
	ticks := make([]uint64, t.used)
	for p := 0; p*queriesPerPool < t.used; p++ {
		n := min(queriesPerPool, t.used-p*queriesPerPool)
		dst := ticks[p*queriesPerPool:]
		if err := check("vkGetQueryPoolResults", call(r.d.fn.getQueryPoolResults, r.d.h, uintptr(t.pools[p]), 0, uintptr(n),
			uintptr(8*n), uintptr(unsafe.Pointer(&dst[0])), 8, queryResult64|queryResultWait)); err != nil {
			return fmt.Errorf("vulkan: %w", err)
		}
	}
	// ticks: the batch's start, then a pair per command, then its end
	if len(ticks) != 2+2*len(t.cmds) {
		return fmt.Errorf("vulkan: %d timestamps for %d commands", len(ticks), len(t.cmds))
	}
	span := func(a, b uint64) float64 { return float64((b-a)&t.mask) * t.period }
	bt := BatchTime{Nanos: span(ticks[0], ticks[len(ticks)-1]), Commands: make([]CommandTime, len(t.cmds))}
	for i, c := range t.cmds {
		c.Nanos = span(ticks[1+2*i], ticks[2+2*i])
		bt.Commands[i] = c
	}
	t.sink(bt)
	return nil
}
