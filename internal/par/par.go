// Package par runs the pieces of one parallel loop on goroutines that
// wait for work by spinning for a short while before they sleep.
//
// Why: a training step is hundreds of parallel regions of 0.05–1 ms each
// (GEMMs, pointwise passes, attention's heads). A goroutine started for
// each region runs only once the runtime has woken a sleeping OS thread
// for it, and on a virtual machine that wake-up takes about 100 µs (an
// idle vCPU halts; waking it goes through the hypervisor): measured on a
// 2-vCPU KVM guest, a region's second worker started 90–110 µs after the
// first, while a helper spinning on an atomic started within 0.1–0.3 µs.
// OpenMP, which PyTorch's CPU kernels run on, spins its threads between
// regions for the same reason.
//
// The helpers spin for spinFor after each piece of work, yielding the
// processor (runtime.Gosched) every few hundred polls so that other
// goroutines are not held up, then sleep on a channel until the next
// region wakes them.
//
// A region that finds the team busy (a region started inside another,
// such as a product inside attention's loop over heads, or one from
// another goroutine) runs its calls one after another on its caller: the
// team never makes a caller wait for another caller. The team's region
// has the cores, so goroutines of the inner region's own would only wait
// for them, each costing a start, a switch and a wake-up: at the mid
// shape of scripts/bench_vs_torch.sh, where attention's products are
// large enough to ask for two workers, that was thousands of goroutines
// a step, started by regions that had already done their work on the
// caller's share (their pieces are claimed as workers come free).
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long a helper polls for the next region before it
// sleeps: long enough to span the gaps between a step's regions (the
// serial work between two GEMMs), short enough that an idle process
// stops using the CPU at once.
const spinFor = 200 * time.Microsecond

// Team is a set of helper goroutines, started as regions need them and
// kept for the life of the process.
type Team struct {
	mu      sync.Mutex // held by the region the team serves
	helpers []*helper
}

// shared is the process's team. It is the one piece of package state, on
// purpose: the process has one set of cores, and two teams would spin
// against each other for them. Regions from any package share it, one at
// a time.
var shared Team

// Run calls body(0) on the caller's goroutine and body(1) … body(n-1)
// on the team's other goroutines, concurrently, and returns once every
// call has returned; which goroutine runs which i is not promised. Where
// the team is busy, the caller makes the calls in turn itself, so no
// call may wait for another.
func Run(n int, body func(i int)) { shared.Run(n, body) }

// Busy says whether the process's team is serving a region now: a region
// started now, from a goroutine other than its caller's or from inside it,
// would run its calls in turn on its caller. A hint, for a caller that
// does less work for a region of one (a product that need not share out
// its pieces): the answer may be stale by the time it is used.
func Busy() bool { return shared.Busy() }

// Busy is the package's Busy on team t.
func (t *Team) Busy() bool {
	if t.mu.TryLock() {
		t.mu.Unlock()
		return false
	}
	return true
}

// Run is the package's Run on team t.
func (t *Team) Run(n int, body func(i int)) {
	if n <= 1 {
		if n == 1 {
			body(0)
		}
		return
	}
	if !t.mu.TryLock() { // nested or concurrent: the caller alone
		for i := range n {
			body(i)
		}
		return
	}
	for len(t.helpers) < n-1 {
		h := &helper{wake: make(chan struct{}, 1)}
		t.helpers = append(t.helpers, h)
		go h.loop()
	}
	used := t.helpers[:n-1]
	for i, h := range used {
		h.start(i+1, body)
	}
	// deferred, so that a panic in the caller's share still waits for the
	// helpers before the team is free again
	defer func() {
		for _, h := range used {
			h.wait()
		}
		t.mu.Unlock()
	}()
	body(0)
}

// helper is one goroutine of a team. The region's caller writes the
// work, then publishes it by raising posted; the helper runs it and
// raises finished to the same count.
type helper struct {
	body     func(int)
	i        int
	posted   atomic.Uint64
	finished atomic.Uint64
	sleeping atomic.Bool
	wake     chan struct{} // a token while the helper may be asleep
}

// start hands the helper body(i).
func (h *helper) start(i int, body func(int)) {
	h.body, h.i = body, i
	h.posted.Add(1)
	// The helper sets sleeping before it checks posted a last time, and
	// posted was raised before this load: either it sees the work or
	// this sees it asleep and wakes it (a stale token only makes it
	// check again).
	if h.sleeping.Load() {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// wait returns once the helper has finished the work start gave it.
func (h *helper) wait() {
	want := h.posted.Load()
	for n := 1; h.finished.Load() != want; n++ {
		if n%256 == 0 {
			runtime.Gosched()
		}
	}
}

// loop runs the work posted to the helper, spinning for spinFor after
// each piece before it sleeps.
func (h *helper) loop() {
	var done uint64
	for {
		start := time.Now()
		for n := 1; h.posted.Load() == done; n++ {
			if n%256 != 0 {
				continue
			}
			runtime.Gosched()
			if time.Since(start) < spinFor {
				continue
			}
			h.sleeping.Store(true)
			if h.posted.Load() == done {
				<-h.wake
			}
			h.sleeping.Store(false)
			start = time.Now()
		}
		done++
		h.body(h.i)
		h.body = nil
		h.finished.Store(done)
	}
}
