// Package dist lets several mixtune processes train one model together:
// data parallelism over MPI. A launcher (Open MPI's mpirun, Slurm's srun,
// MPICH's mpiexec) starts the processes; Open finds which one from the
// environment, loads the MPI library at run time (no cgo: purego, as the
// OpenBLAS backend does) and returns a Comm over every process of the job.
// Without a launcher it returns Single, which does nothing, so a plain
// `mixtune train` runs exactly as it always has and never touches MPI.
//
// The trainer sees only Comm: ranks, sum-reductions of float32 and float64
// buffers, broadcasts and gathers. The same seam can carry NCCL once a
// GPU backend exists (docs/distributed.md).
package dist

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Comm is a group of processes that train together. Every collective
// (every method but Rank, Size, Info and Abort) must be called by every
// rank, in the same order, with buffers of the same length; the results
// are the same bits on every rank.
type Comm interface {
	Rank() int
	Size() int
	Info() Info

	// AllreduceFloat32 replaces buf on every rank by the element-wise sum
	// of every rank's buf.
	AllreduceFloat32(buf []float32) error
	// AllreduceFloat64 is AllreduceFloat32 for float64 (scalars the
	// trainer needs exactly: loss sums, token and overflow counts).
	AllreduceFloat64(buf []float64) error
	// StartAllreduceFloat32 queues AllreduceFloat32(buf) and returns at
	// once; Wait on the result. Queued reductions run one at a time, in
	// the order they were started, while the caller computes: that is how
	// gradients are reduced during the backward pass. buf must not be
	// touched until Wait returns.
	StartAllreduceFloat32(buf []float32) Pending
	// Bcast copies root's buf into every other rank's buf.
	Bcast(buf []byte, root int) error
	// BcastFloat32 is Bcast for float32 values.
	BcastFloat32(buf []float32, root int) error
	// Allgather returns every rank's b, in rank order; lengths may differ.
	Allgather(b []byte) ([][]byte, error)

	// Abort ends every process of the job with code: for a failure one
	// rank meets alone, which would otherwise leave the others waiting in
	// a collective forever. It does not return.
	Abort(code int)
	// Close leaves the group (MPI_Finalize). Every rank must call it.
	Close() error
}

// Pending is a reduction started by StartAllreduceFloat32.
type Pending interface {
	// Wait blocks until the reduction is done and returns its error.
	Wait() error
	// Busy is how long the reduction itself took, once Wait has returned:
	// the communication time, whether or not it overlapped with compute.
	Busy() time.Duration
}

// Info describes the job, for run.json and the log.
type Info struct {
	Launcher  string   `json:"launcher"`            // "none", "mpirun (Open MPI)", "srun (Slurm)", "mpiexec (MPICH)", "in-process"
	Library   string   `json:"library,omitempty"`   // MPI_Get_library_version, first line
	Reduction string   `json:"reduction,omitempty"` // how sums are formed: "native" (MPI_Allreduce) or "ordered"
	Hosts     []string `json:"hosts"`               // each rank's host name, in rank order
}

// LocalSize is the number of ranks on this rank's host.
func LocalSize(c Comm) int {
	hosts := c.Info().Hosts
	if len(hosts) <= c.Rank() {
		return 1
	}
	n := 0
	for _, h := range hosts {
		if h == hosts[c.Rank()] {
			n++
		}
	}
	return max(n, 1)
}

// LocalRank is this rank's position among the ranks on its host, in
// rank order: which of the host's GPUs it takes.
func LocalRank(c Comm) int {
	hosts := c.Info().Hosts
	if len(hosts) <= c.Rank() {
		return 0
	}
	n := 0
	for _, h := range hosts[:c.Rank()] {
		if h == hosts[c.Rank()] {
			n++
		}
	}
	return n
}

// Single is the Comm of a process that trains alone: every collective is
// the identity.
type Single struct{ host string }

// NewSingle returns the one-process Comm.
func NewSingle() *Single {
	h, _ := os.Hostname()
	return &Single{host: h}
}

func (*Single) Rank() int { return 0 }
func (*Single) Size() int { return 1 }
func (s *Single) Info() Info {
	return Info{Launcher: "none", Hosts: []string{s.host}}
}
func (*Single) AllreduceFloat32([]float32) error        { return nil }
func (*Single) AllreduceFloat64([]float64) error        { return nil }
func (*Single) StartAllreduceFloat32([]float32) Pending { return done{} }
func (*Single) Bcast([]byte, int) error                 { return nil }
func (*Single) BcastFloat32([]float32, int) error       { return nil }
func (*Single) Allgather(b []byte) ([][]byte, error)    { return [][]byte{append([]byte(nil), b...)}, nil }
func (*Single) Abort(code int)                          { os.Exit(code) }
func (*Single) Close() error                            { return nil }

// pending is a queued reduction.
type pending struct {
	done chan struct{}
	err  error
	busy time.Duration
}

func (p *pending) Wait() error { <-p.done; return p.err }

// startSum queues sum(buf) on a communicator's call goroutine and returns
// at once; closed (read under mu) refuses with closedErr.
func startSum(mu *sync.Mutex, closed *bool, calls chan<- func(), closedErr string, sum func([]float32) error, buf []float32) Pending {
	p := &pending{done: make(chan struct{})}
	mu.Lock()
	defer mu.Unlock()
	if *closed {
		p.err = errors.New(closedErr)
		close(p.done)
		return p
	}
	calls <- func() {
		t := time.Now()
		p.err = sum(buf)
		p.busy = time.Since(t)
		close(p.done)
	}
	return p
}
func (p *pending) Busy() time.Duration { return p.busy }

type done struct{}

func (done) Wait() error         { return nil }
func (done) Busy() time.Duration { return 0 }

// Reduction says how a sum over ranks is formed.
type Reduction string

const (
	// Native calls MPI_Allreduce: the library picks the algorithm (ring,
	// recursive doubling...) by message size and world size. Every rank
	// gets the same bits and a repeat of the same job gets the same bits
	// (Open MPI's choice is a fixed function of the sizes), but the order
	// of the additions, so the last bit, can change with the world size,
	// the bucket sizes and the library.
	Native Reduction = "native"
	// Ordered adds the ranks' values in rank order, ((r0+r1)+r2)+...,
	// whatever the library: an all-to-all moves each rank's slice of
	// every buffer to the rank that owns it, the owner adds them in rank
	// order, and an all-gather hands the sums back. Only data moves over
	// MPI, so the bits depend on the world size alone. Same bandwidth as
	// a ring, but an all-to-all costs a message per pair of ranks.
	Ordered Reduction = "ordered"
)

// ParseReduction reads "native" or "ordered".
func ParseReduction(s string) (Reduction, error) {
	switch r := Reduction(strings.ToLower(strings.TrimSpace(s))); r {
	case Native, Ordered:
		return r, nil
	case "":
		return Native, nil
	}
	return "", fmt.Errorf("unknown reduction %q (want native or ordered)", s)
}

// Options are the choices Open cannot read from the launcher.
type Options struct {
	Reduction Reduction // "" is Native
	// Library is the MPI library to load (a file name or path); "" tries
	// MIXTUNE_MPI_LIB, then the usual sonames for the launcher found.
	Library string
}

// ErrNoMPI wraps every failure to load or start MPI under a launcher.
var ErrNoMPI = errors.New("MPI is not available")

// Open returns the Comm of this process: Single without a launcher (or
// with MIXTUNE_DIST=off, or a launcher that started one process), else a
// Comm over MPI. Under a launcher, a library that is missing, of an ABI
// mixtune does not speak, or that disagrees with the launcher about the
// job's size is an error wrapping ErrNoMPI that says what to do.
func Open(opt Options) (Comm, error) {
	l, ok, err := Detect(os.Getenv)
	if err != nil {
		return nil, err
	}
	if !ok || l.Size == 1 {
		return NewSingle(), nil
	}
	if opt.Reduction == "" {
		opt.Reduction = Native
	}
	return openMPI(l, opt)
}

// Launch is what the launcher's environment says about this process.
type Launch struct {
	Launcher  string // as Info.Launcher
	Rank      int
	Size      int
	LocalRank int
	libraries []string // sonames to try, most likely first
}

// Sonames of the MPI libraries, by ABI. Open MPI 3 to 5 is libmpi.so.40;
// MPICH 3.1 and later, and the MPICH-ABI family (Intel MPI, Cray MPICH,
// MVAPICH), is libmpi.so.12 or libmpich.so.12.
var (
	openMPISonames = []string{"libmpi.so.40", "libmpi.40.dylib"}
	mpichSonames   = []string{"libmpich.so.12", "libmpi.so.12", "libmpich.12.dylib"}
)

// Detect reads the launcher's variables from env: ok is false when none
// is set (a plain process). A variable that is set but not a number is an
// error.
func Detect(env func(string) string) (Launch, bool, error) {
	if v := strings.ToLower(env("MIXTUNE_DIST")); v == "off" || v == "0" || v == "false" || v == "none" {
		return Launch{}, false, nil
	}
	num := func(name string) (int, bool, error) {
		s := env(name)
		if s == "" {
			return 0, false, nil
		}
		var n int
		if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n < 0 {
			return 0, false, fmt.Errorf("%s=%q is not a rank or a count", name, s)
		}
		return n, true, nil
	}
	try := func(launcher, rankVar, sizeVar, localVar string, libs []string) (Launch, bool, error) {
		rank, okR, err := num(rankVar)
		if err != nil {
			return Launch{}, false, err
		}
		size, okS, err := num(sizeVar)
		if err != nil {
			return Launch{}, false, err
		}
		if !okR || !okS {
			return Launch{}, false, nil
		}
		if size < 1 || rank >= size {
			return Launch{}, false, fmt.Errorf("%s=%d and %s=%d do not make a rank of a job", rankVar, rank, sizeVar, size)
		}
		local, _, err := num(localVar)
		if err != nil {
			return Launch{}, false, err
		}
		return Launch{Launcher: launcher, Rank: rank, Size: size, LocalRank: local, libraries: libs}, true, nil
	}
	both := append(append([]string(nil), openMPISonames...), mpichSonames...)
	mpichFirst := append(append([]string(nil), mpichSonames...), openMPISonames...)
	pmi := "PMI"
	switch {
	case env("HYDI_CONTROL_FD") != "":
		pmi = "mpiexec (MPICH)"
	case env("SLURM_STEP_NUM_TASKS") != "":
		pmi = "srun (Slurm, PMI)"
	}
	// Open MPI's mpirun (prterun in Open MPI 5 sets the same variables),
	// then a PMI launcher (MPICH's hydra, or srun --mpi=pmi2), then srun.
	// mpirun and hydra start their daemons with srun inside a Slurm job,
	// so the SLURM_ variables a rank inherits there describe the daemons:
	// they are read last. A job step of srun is what SLURM_STEP_NUM_TASKS
	// marks: a batch script has SLURM_PROCID=0 and SLURM_NTASKS of the
	// whole allocation, but is one process.
	for _, c := range []struct {
		launcher, rank, size, local string
		libs                        []string
	}{
		{"mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", both},
		{pmi, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", mpichFirst},
		{"srun (Slurm)", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", both},
	} {
		l, ok, err := try(c.launcher, c.rank, c.size, c.local, c.libs)
		if err != nil || ok {
			return l, ok, err
		}
	}
	return Launch{}, false, nil
}

// Agree is the collective check after a step that may fail on some ranks
// and not others (reading inputs, writing the run directory): every rank
// passes its own error and every rank gets the same verdict, nil only if
// no rank failed, so that all of them go on or all of them stop, none
// left waiting in a collective. A failure is a *JobError.
func Agree(c Comm, err error) error {
	if c.Size() == 1 {
		return err
	}
	var msg []byte
	if err != nil {
		msg = []byte(err.Error())
		if len(msg) == 0 {
			msg = []byte("failed")
		}
	}
	all, gerr := c.Allgather(msg)
	if gerr != nil {
		if err != nil {
			return err
		}
		return gerr
	}
	hosts := c.Info().Hosts
	var parts []string
	for r, m := range all {
		if len(m) == 0 {
			continue
		}
		host := ""
		if r < len(hosts) {
			host = " on " + hosts[r]
		}
		parts = append(parts, fmt.Sprintf("rank %d%s: %s", r, host, m))
	}
	if len(parts) == 0 {
		return nil
	}
	// One message per distinct failure: a rank whose failure rank 0 (or
	// an earlier rank) also had stays quiet.
	quiet := err == nil
	for r := 0; r < c.Rank() && !quiet; r++ {
		quiet = len(all[r]) > 0 && string(all[r]) == string(msg)
	}
	return &JobError{Msg: strings.Join(parts, "; "), Err: err, Quiet: quiet}
}

// JobError is a failure every rank of the job knows of: Agree's verdict.
// The ranks end together and in order (each may Close), and the failure
// is printed once: by each rank whose failure no lower rank shares.
type JobError struct {
	Msg   string // every failed rank's message, with its rank and host
	Err   error  // this rank's own failure; nil if it did not fail
	Quiet bool   // another rank prints it
}

// Error is this rank's own failure, or else every failed rank's.
func (e *JobError) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Msg
}

func (e *JobError) Unwrap() error { return e.Err }

// IsJobError reports whether err is a failure every rank knows of; any
// other failure of a rank in a job of several must Abort the job.
func IsJobError(err error) bool {
	var j *JobError
	return errors.As(err, &j)
}

// IsQuiet reports whether err is a failure that another rank prints.
func IsQuiet(err error) bool {
	var j *JobError
	return errors.As(err, &j) && j.Quiet
}

// AnyTrue is true on every rank if it is true on any: a collective
// decision, such as stopping after this step because one rank was
// signalled.
func AnyTrue(c Comm, v bool) (bool, error) {
	if c.Size() == 1 {
		return v, nil
	}
	x := []float64{0}
	if v {
		x[0] = 1
	}
	err := c.AllreduceFloat64(x)
	return x[0] > 0, err
}
