package dist

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name     string
		env      func(string) string
		ok       bool
		launcher string
		rank     int
		size     int
		err      string
	}{
		{"plain process", env(), false, "", 0, 0, ""},
		{"open mpi", env("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "4", "OMPI_COMM_WORLD_LOCAL_RANK", "1"), true, "mpirun (Open MPI)", 1, 4, ""},
		{"hydra", env("PMI_RANK", "2", "PMI_SIZE", "3", "HYDI_CONTROL_FD", "7"), true, "mpiexec (MPICH)", 2, 3, ""},
		{"srun", env("SLURM_PROCID", "5", "SLURM_STEP_NUM_TASKS", "8", "SLURM_LOCALID", "1", "PMIX_RANK", "5"), true, "srun (Slurm)", 5, 8, ""},
		// A batch script: SLURM_PROCID and SLURM_NTASKS, but no job step.
		{"sbatch script", env("SLURM_PROCID", "0", "SLURM_NTASKS", "8"), false, "", 0, 0, ""},
		// mpirun inside a Slurm job: the SLURM_ variables describe its daemons.
		{"mpirun under slurm", env("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4", "SLURM_PROCID", "0", "SLURM_STEP_NUM_TASKS", "2"), true, "mpirun (Open MPI)", 3, 4, ""},
		{"switched off", env("MIXTUNE_DIST", "off", "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2"), false, "", 0, 0, ""},
		{"garbage", env("OMPI_COMM_WORLD_RANK", "x", "OMPI_COMM_WORLD_SIZE", "2"), false, "", 0, 0, "OMPI_COMM_WORLD_RANK"},
		{"rank past size", env("OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "2"), false, "", 0, 0, "do not make a rank"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, ok, err := Detect(c.env)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one mentioning %q", err, c.err)
				}
				return
			}
			if err != nil || ok != c.ok || l.Launcher != c.launcher || l.Rank != c.rank || l.Size != c.size {
				t.Fatalf("got %+v ok=%v err=%v", l, ok, err)
			}
		})
	}
}

// The single-process Comm changes nothing.
func TestSingle(t *testing.T) {
	c := NewSingle()
	buf := []float32{1, 2}
	if err := c.AllreduceFloat32(buf); err != nil || buf[0] != 1 || buf[1] != 2 {
		t.Fatal(buf, err)
	}
	if err := c.StartAllreduceFloat32(buf).Wait(); err != nil {
		t.Fatal(err)
	}
	all, err := c.Allgather([]byte("x"))
	if err != nil || len(all) != 1 || string(all[0]) != "x" {
		t.Fatal(all, err)
	}
	if err := Agree(c, errors.New("boom")); err == nil || err.Error() != "boom" {
		t.Fatal(err)
	}
	if LocalSize(c) != 1 {
		t.Fatal(LocalSize(c))
	}
}

// runRanks runs fn on each of n in-process ranks and returns their errors.
func runRanks(n int, fn func(c Comm) error) []error {
	cs := NewLocal(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs[i] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

// checkCollectives is what every Comm must do; the MPI test runs it in
// each rank of a real job.
func checkCollectives(c Comm) error {
	r, n := c.Rank(), c.Size()
	// sums: every rank gets the same, exact for these small integers
	buf := make([]float32, 1000)
	for i := range buf {
		buf[i] = float32(r*1000 + i)
	}
	if err := c.AllreduceFloat32(buf); err != nil {
		return err
	}
	for i, v := range buf {
		want := float32(n*(n-1)/2*1000 + n*i)
		if v != want {
			return fmt.Errorf("rank %d: sum[%d] = %v, want %v", r, i, v, want)
		}
	}
	f64 := []float64{float64(r), 1}
	if err := c.AllreduceFloat64(f64); err != nil {
		return err
	}
	if f64[0] != float64(n*(n-1)/2) || f64[1] != float64(n) {
		return fmt.Errorf("rank %d: float64 sums %v", r, f64)
	}
	// reductions queued together complete, in order
	bufs := make([][]float32, 3)
	ps := make([]Pending, 3)
	for k := range bufs {
		bufs[k] = []float32{float32(k + r)}
		ps[k] = c.StartAllreduceFloat32(bufs[k])
	}
	for k, p := range ps {
		if err := p.Wait(); err != nil {
			return err
		}
		if want := float32(n*k + n*(n-1)/2); bufs[k][0] != want {
			return fmt.Errorf("rank %d: queued sum %d = %v, want %v", r, k, bufs[k][0], want)
		}
	}
	// broadcasts from the last rank
	b := []byte{byte(r), 0, 0}
	if err := c.Bcast(b, n-1); err != nil {
		return err
	}
	fb := []float32{float32(r)}
	if err := c.BcastFloat32(fb, n-1); err != nil {
		return err
	}
	if b[0] != byte(n-1) || fb[0] != float32(n-1) {
		return fmt.Errorf("rank %d: bcast gave %v, %v", r, b, fb)
	}
	// gathers of different lengths, an empty one included
	all, err := c.Allgather([]byte(strings.Repeat("x", r)))
	if err != nil {
		return err
	}
	for k, a := range all {
		if string(a) != strings.Repeat("x", k) {
			return fmt.Errorf("rank %d: gathered %q from rank %d", r, a, k)
		}
	}
	// agreement: the last rank fails, every rank learns it
	var mine error
	if r == n-1 {
		mine = errors.New("disk full")
	}
	err = Agree(c, mine)
	switch {
	case r == n-1 && !errors.Is(err, mine):
		return fmt.Errorf("rank %d: Agree returned %v, not its own error", r, err)
	case r < n-1 && (!IsQuiet(err) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d on ", n-1)) || !strings.Contains(err.Error(), "disk full")):
		return fmt.Errorf("rank %d: Agree returned %v", r, err)
	case r == n-1 && n > 1 && (IsQuiet(err) || !IsJobError(err)):
		return fmt.Errorf("rank %d: its own failure is not a loud job error: %#v", r, err)
	}
	// the same failure everywhere is printed by rank 0 alone
	err = Agree(c, errors.New("bad recipe"))
	if !strings.Contains(err.Error(), "bad recipe") || (n > 1 && IsQuiet(err) != (r > 0)) {
		return fmt.Errorf("rank %d: a failure all ranks share: %v (quiet %v)", r, err, IsQuiet(err))
	}
	if err := Agree(c, nil); err != nil {
		return fmt.Errorf("rank %d: Agree with no failure: %v", r, err)
	}
	stop, err := AnyTrue(c, r == 0)
	if err != nil || !stop {
		return fmt.Errorf("rank %d: AnyTrue %v %v", r, stop, err)
	}
	return nil
}

func TestLocalCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		for r, err := range runRanks(n, checkCollectives) {
			if err != nil {
				t.Errorf("%d ranks: rank %d: %v", n, r, err)
			}
		}
	}
}

// The in-process reduction adds in rank order: with values whose float32
// sum depends on the order, every rank gets ((a+b)+c).
func TestLocalSumIsInRankOrder(t *testing.T) {
	vals := []float32{1e8, 1, -1e8}
	got := make([]float32, 3)
	errs := runRanks(3, func(c Comm) error {
		b := []float32{vals[c.Rank()]}
		err := c.AllreduceFloat32(b)
		got[c.Rank()] = b[0]
		return err
	})
	want := (vals[0] + vals[1]) + vals[2]
	for r := range got {
		if errs[r] != nil || got[r] != want {
			t.Fatalf("rank %d: %v (%v), want %v", r, got[r], errs[r], want)
		}
	}
}
