package dist

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// NewLocal returns n Comms joined in this process: rank i is the i-th.
// Each rank is meant to run on its own goroutines, as a real rank runs in
// its own process; the collectives behave as over MPI, with the Ordered
// reduction (sums in rank order). It lets tests, and machines without
// MPI, exercise the data-parallel code paths.
func NewLocal(n int) []Comm {
	host, _ := os.Hostname()
	g := &localGroup{n: n, cur: newRound(n)}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = host
	}
	cs := make([]Comm, n)
	for i := range cs {
		c := &localComm{g: g, rank: i, calls: make(chan func(), 4096),
			info: Info{Launcher: "in-process", Reduction: string(Ordered), Hosts: hosts}}
		go func() {
			for fn := range c.calls {
				fn()
			}
		}()
		cs[i] = c
	}
	return cs
}

// errAborted is what a collective returns once a rank has aborted.
var errAborted = errors.New("another rank aborted the job")

type localGroup struct {
	n       int
	mu      sync.Mutex
	cur     *round
	aborted bool
}

// round is one collective: each rank deposits its value, and all of them
// see every value once the last has arrived.
type round struct {
	slots   []any
	arrived int
	done    chan struct{}
	err     error
}

func newRound(n int) *round { return &round{slots: make([]any, n), done: make(chan struct{})} }

// exchange deposits v as rank's value in the current collective and
// returns every rank's, in rank order.
func (g *localGroup) exchange(rank int, v any) ([]any, error) {
	g.mu.Lock()
	if g.aborted {
		g.mu.Unlock()
		return nil, errAborted
	}
	r := g.cur
	r.slots[rank] = v
	r.arrived++
	if r.arrived == g.n {
		close(r.done)
		g.cur = newRound(g.n)
	}
	g.mu.Unlock()
	<-r.done
	return r.slots, r.err
}

type localComm struct {
	g      *localGroup
	rank   int
	info   Info
	calls  chan func()
	mu     sync.Mutex
	closed bool
}

func (c *localComm) Rank() int  { return c.rank }
func (c *localComm) Size() int  { return c.g.n }
func (c *localComm) Info() Info { return c.info }

func (c *localComm) do(fn func() error) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("comm is closed")
	}
	res := make(chan error, 1)
	c.calls <- func() { res <- fn() }
	c.mu.Unlock()
	return <-res
}

func (c *localComm) sum32(buf []float32) error { return sumInRankOrder(c, buf) }

// sumInRankOrder replaces buf with the sum of every rank's buf, added in
// rank order.
func sumInRankOrder[F float32 | float64](c *localComm, buf []F) error {
	all, err := c.g.exchange(c.rank, append([]F(nil), buf...))
	if err != nil {
		return err
	}
	for r, v := range all {
		x := v.([]F)
		if len(x) != len(buf) {
			return fmt.Errorf("allreduce: rank %d has %d values, rank %d has %d", r, len(x), c.rank, len(buf))
		}
		if r == 0 {
			copy(buf, x)
			continue
		}
		for i, y := range x {
			buf[i] += y
		}
	}
	return nil
}

func (c *localComm) AllreduceFloat32(buf []float32) error {
	return c.do(func() error { return c.sum32(buf) })
}

func (c *localComm) AllreduceFloat64(buf []float64) error {
	return c.do(func() error { return sumInRankOrder(c, buf) })
}

func (c *localComm) StartAllreduceFloat32(buf []float32) Pending {
	return startSum(&c.mu, &c.closed, c.calls, "comm is closed", c.sum32, buf)
}

func (c *localComm) Bcast(buf []byte, root int) error {
	return c.do(func() error {
		var v any
		if c.rank == root {
			v = append([]byte(nil), buf...)
		}
		all, err := c.g.exchange(c.rank, v)
		if err != nil {
			return err
		}
		src := all[root].([]byte)
		if len(src) != len(buf) {
			return fmt.Errorf("bcast: root has %d bytes, rank %d %d", len(src), c.rank, len(buf))
		}
		copy(buf, src)
		return nil
	})
}

func (c *localComm) BcastFloat32(buf []float32, root int) error {
	return c.do(func() error {
		var v any
		if c.rank == root {
			v = append([]float32(nil), buf...)
		}
		all, err := c.g.exchange(c.rank, v)
		if err != nil {
			return err
		}
		src := all[root].([]float32)
		if len(src) != len(buf) {
			return fmt.Errorf("bcast: root has %d values, rank %d %d", len(src), c.rank, len(buf))
		}
		copy(buf, src)
		return nil
	})
}

func (c *localComm) Allgather(b []byte) ([][]byte, error) {
	var out [][]byte
	err := c.do(func() error {
		all, err := c.g.exchange(c.rank, append([]byte(nil), b...))
		if err != nil {
			return err
		}
		out = make([][]byte, len(all))
		for r, v := range all {
			out[r] = append([]byte(nil), v.([]byte)...)
		}
		return nil
	})
	return out, err
}

// Abort fails every collective of the group, now and later, and ends the
// calling goroutine's rank with a panic (an in-process rank has no
// process of its own to exit).
func (c *localComm) Abort(code int) {
	g := c.g
	g.mu.Lock()
	if !g.aborted {
		g.aborted = true
		g.cur.err = errAborted
		close(g.cur.done)
	}
	g.mu.Unlock()
	panic(fmt.Sprintf("rank %d aborted the job with code %d", c.rank, code))
}

func (c *localComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.calls)
	}
	return nil
}
