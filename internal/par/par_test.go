package par

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunCallsEachIndexOnce runs regions of every size, many times over,
// and checks that each index ran once and that what the calls wrote is
// visible to the caller once Run returns.
func TestRunCallsEachIndexOnce(t *testing.T) {
	var team Team
	for _, n := range []int{0, 1, 2, 3, 5, 8} {
		for rep := range 200 {
			got := make([]int, n)
			team.Run(n, func(i int) { got[i] += rep + 1 })
			for i, v := range got {
				if v != rep+1 {
					t.Fatalf("n=%d rep %d: index %d ran %d times (sum %d)", n, rep, i, v/(rep+1), v)
				}
			}
		}
	}
}

// TestRunIsConcurrent needs the calls to run at the same time: call 0
// waits for every other call to have started, which a team that ran
// them one after another could never satisfy.
func TestRunIsConcurrent(t *testing.T) {
	var team Team
	for _, n := range []int{2, 4} {
		for range 50 {
			var started sync.WaitGroup
			started.Add(n - 1)
			done := make(chan struct{})
			go func() {
				team.Run(n, func(i int) {
					if i == 0 {
						started.Wait()
					} else {
						started.Done()
					}
				})
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("n=%d: call 0 waited 10 s for the others to start", n)
			}
		}
	}
}

// TestRunWakesSleepingHelpers lets the helpers go to sleep between
// regions and checks the next region still runs every call.
func TestRunWakesSleepingHelpers(t *testing.T) {
	var team Team
	for range 5 {
		var calls atomic.Int64
		done := make(chan struct{})
		go func() {
			team.Run(3, func(int) { calls.Add(1) })
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("a region after the helpers slept had not returned in 10 s (%d calls ran)", calls.Load())
		}
		if calls.Load() != 3 {
			t.Fatalf("%d calls, want 3", calls.Load())
		}
		time.Sleep(3 * spinFor)
	}
	team.mu.Lock()
	for i, h := range team.helpers {
		if !h.sleeping.Load() {
			t.Errorf("helper %d still spinning %v after its last region", i, 3*spinFor)
		}
	}
	team.mu.Unlock()
}

// TestRunNestedAndConcurrent starts regions inside regions and from
// several goroutines at once: those that find the team busy run their
// calls on their caller, and every call runs once.
func TestRunNestedAndConcurrent(t *testing.T) {
	var team Team
	var total atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				team.Run(2+g%2, func(int) {
					team.Run(3, func(int) { total.Add(1) })
				})
			}
		}()
	}
	wg.Wait()
	if want := int64(100 * 3 * (2 + 3 + 2 + 3)); total.Load() != want {
		t.Fatalf("%d inner calls, want %d", total.Load(), want)
	}
}

// TestRunPanicWaitsForHelpers panics in the caller's share while a
// helper is still working: the panic must reach the caller only once the
// helper has finished, and leave the team free for the next region.
func TestRunPanicWaitsForHelpers(t *testing.T) {
	var team Team
	var helperDone atomic.Bool
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the caller's panic was lost")
			}
			if !helperDone.Load() {
				t.Fatal("the panic left Run while a helper was still running its share")
			}
		}()
		team.Run(2, func(i int) {
			if i == 0 {
				panic("caller's share")
			}
			time.Sleep(50 * time.Millisecond)
			helperDone.Store(true)
		})
	}()
	if !team.mu.TryLock() {
		t.Fatal("the team is still held after the panicking region")
	}
	team.mu.Unlock()
	var calls atomic.Int64
	team.Run(3, func(int) { calls.Add(1) })
	if calls.Load() != 3 {
		t.Fatalf("the next region ran %d calls, want 3", calls.Load())
	}
}

// TestRunNestedRunsOnCaller: a region started inside another makes its
// calls in turn, in order, on the caller: none overlaps another, even
// when the first sleeps (goroutines of the region's own would run then).
func TestRunNestedRunsOnCaller(t *testing.T) {
	var team Team
	team.Run(2, func(outer int) {
		var inside atomic.Int32
		var order []int
		team.Run(3, func(i int) {
			if inside.Add(1) != 1 {
				t.Errorf("outer %d: inner call %d overlaps another", outer, i)
			}
			if i == 0 {
				time.Sleep(5 * time.Millisecond)
			}
			order = append(order, i)
			inside.Add(-1)
		})
		if len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 2 {
			t.Errorf("outer %d: inner calls ran in order %v, want [0 1 2]", outer, order)
		}
	})
}

// TestBusy: a free team is not busy; inside its region it is, for every
// call; and it is free again once the region has returned.
func TestBusy(t *testing.T) {
	var team Team
	if team.Busy() {
		t.Fatal("a new team says it is busy")
	}
	var busy atomic.Int32
	team.Run(2, func(int) {
		if team.Busy() {
			busy.Add(1)
		}
	})
	if busy.Load() != 2 {
		t.Fatalf("%d of 2 calls inside the region saw the team busy", busy.Load())
	}
	if team.Busy() {
		t.Fatal("the team says it is busy after its region returned")
	}
}
