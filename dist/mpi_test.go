//go:build (darwin || freebsd || linux || netbsd) && !android && !faketime

package dist

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// With MIXTUNE_DIST_CHILD set, the test binary is one rank of an MPI job
// started by a test below: it opens the Comm, runs the collectives and
// prints "ok" or the failure.
func TestMain(m *testing.M) {
	if mode := os.Getenv("MIXTUNE_DIST_CHILD"); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

func child(mode string) int {
	red, _ := ParseReduction(os.Getenv("MIXTUNE_DIST_REDUCTION"))
	c, err := Open(Options{Reduction: red})
	if mode == "open-error" { // the test wants Open's message
		if err == nil {
			fmt.Println("Open succeeded")
			c.Close()
			return 1
		}
		fmt.Printf("open error: %v (ErrNoMPI %v)\n", err, errors.Is(err, ErrNoMPI))
		return 0
	}
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	defer c.Close()
	if err := checkCollectives(c); err != nil {
		fmt.Println(err)
		c.Abort(1)
	}
	// Go's own signal handlers survive MPI_Init: a nil dereference is
	// still a panic that recover sees, not a crash in the library.
	if !recovers() {
		fmt.Println("a nil dereference was not recovered after MPI_Init")
		c.Abort(1)
	}
	if mode == "order" {
		// values whose float32 sum depends on the order of the additions
		vals := []float32{1e8, 1, -1e8, 3}
		b := make([]float32, 1<<16)
		for i := range b {
			b[i] = vals[c.Rank()%len(vals)] * float32(1+i%7)
		}
		if err := c.AllreduceFloat32(b); err != nil {
			fmt.Println(err)
			c.Abort(1)
		}
		h := uint64(14695981039346656037)
		for _, v := range b {
			h = (h ^ uint64(int32(v*1000))) * 1099511628211
		}
		fmt.Printf("sum rank %d hash %x first %v\n", c.Rank(), h, b[0])
	}
	fmt.Printf("ok rank %d of %d: %s; %s\n", c.Rank(), c.Size(), c.Info().Launcher, c.Info().Library)
	return 0
}

func recovers() (ok bool) {
	defer func() { ok = recover() != nil }()
	var p *[4]int
	_ = p[1]
	return false
}

// mpirun is Open MPI's launcher, or a reason to skip.
func mpirun(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"mpirun.openmpi", "mpirun"} {
		if p, err := exec.LookPath(name); err == nil {
			out, _ := exec.Command(p, "--version").CombinedOutput()
			if strings.Contains(string(out), "Open MPI") {
				return p
			}
		}
	}
	t.Skip("Open MPI's mpirun is not installed (Debian: apt-get install openmpi-bin libopenmpi3)")
	return ""
}

// launch runs this test binary as n ranks of an Open MPI job.
func launch(t *testing.T, n int, env ...string) (string, error) {
	t.Helper()
	args := []string{"--oversubscribe", "--bind-to", "none", "-np", fmt.Sprint(n), os.Args[0]}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	cmd := exec.Command(mpirun(t), args...)
	cmd.Env = append(os.Environ(), env...)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("mpirun -np %d did not finish in 2 minutes:\n%s", n, out)
	}
	return string(out), err
}

func TestOpenMPICollectives(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MPI jobs")
	}
	for _, n := range []int{2, 3} {
		for _, red := range []Reduction{Native, Ordered} {
			out, err := launch(t, n, "MIXTUNE_DIST_CHILD=check", "MIXTUNE_DIST_REDUCTION="+string(red))
			if err != nil || strings.Count(out, "ok rank") != n {
				t.Fatalf("%d ranks, %s: %v\n%s", n, red, err, out)
			}
			if n == 2 && red == Native {
				t.Logf("%s", strings.TrimSpace(out))
			}
		}
	}
}

// The ordered reduction gives the same bits for a given world size
// whatever the run; the native one does too on one host with Open MPI's
// default algorithms (recorded, not required, for 4 ranks).
func TestReductionsRepeat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MPI jobs")
	}
	hashes := func(red Reduction, n int) string {
		out, err := launch(t, n, "MIXTUNE_DIST_CHILD=order", "MIXTUNE_DIST_REDUCTION="+string(red))
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		var hs []string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 5 && f[0] == "sum" {
				hs = append(hs, f[4])
			}
		}
		if len(hs) != n {
			t.Fatalf("%d hashes from %d ranks:\n%s", len(hs), n, out)
		}
		for _, h := range hs[1:] {
			if h != hs[0] {
				t.Fatalf("%s, %d ranks: the ranks disagree: %v", red, n, hs)
			}
		}
		return hs[0]
	}
	for _, n := range []int{2, 4} {
		a, b := hashes(Ordered, n), hashes(Ordered, n)
		if a != b {
			t.Errorf("ordered reduction on %d ranks changed between runs: %s, %s", n, a, b)
		}
		na, nb := hashes(Native, n), hashes(Native, n)
		t.Logf("%d ranks: ordered %s, native %s then %s", n, a, na, nb)
		if na != nb {
			t.Errorf("native reduction on %d ranks changed between runs", n)
		}
	}
}

// A library that is not there, or not MPI, is a clear error, not a crash.
func TestLibraryErrors(t *testing.T) {
	l := Launch{Launcher: "mpirun (Open MPI)", Rank: 0, Size: 2}
	for _, c := range []struct {
		lib, want string
	}{
		{"libmixtune-no-such-mpi.so", "no MPI library loads"},
		{"libc.so.6", "neither Open MPI nor of MPICH's ABI"},
	} {
		_, err := openMPI(l, Options{Library: c.lib})
		if err == nil || !errors.Is(err, ErrNoMPI) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "MIXTUNE_MPI_LIB") {
			t.Errorf("%s: %v", c.lib, err)
		}
	}
}

// Under Open MPI's mpirun, a library of another MPI (or one that cannot
// be found) is refused with a message naming the cause.
func TestLauncherLibraryMismatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MPI jobs")
	}
	out, err := launch(t, 2, "MIXTUNE_DIST_CHILD=open-error", "MIXTUNE_MPI_LIB=libmixtune-no-such-mpi.so")
	if err != nil || strings.Count(out, "no MPI library loads") != 2 || strings.Count(out, "ErrNoMPI true") != 2 {
		t.Errorf("missing library: %v\n%s", err, out)
	}
	if _, lerr := exec.LookPath("mpiexec.mpich"); lerr != nil {
		if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libmpich.so.12"); err != nil {
			t.Skip("MPICH is not installed: the library mismatch is not tried")
		}
	}
	out, err = launch(t, 2, "MIXTUNE_DIST_CHILD=open-error", "MIXTUNE_MPI_LIB=libmpich.so.12")
	if err != nil || strings.Count(out, "different MPI implementations") != 2 {
		t.Errorf("MPICH library under Open MPI's mpirun: %v\n%s", err, out)
	}
}

// MPICH's ABI, under its own launcher, where it is installed.
func TestMPICHCollectives(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MPI jobs")
	}
	p, err := exec.LookPath("mpiexec.mpich")
	if err != nil {
		t.Skip("MPICH is not installed (Debian: apt-get install mpich)")
	}
	for _, red := range []Reduction{Native, Ordered} {
		cmd := exec.Command(p, "-n", "3", os.Args[0])
		cmd.Env = append(os.Environ(), "MIXTUNE_DIST_CHILD=check", "MIXTUNE_DIST_REDUCTION="+string(red))
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Count(string(out), "ok rank") != 3 || !strings.Contains(string(out), "MPICH") {
			t.Fatalf("%s: %v\n%s", red, err, out)
		}
		t.Logf("%s", strings.TrimSpace(string(out)))
	}
}
