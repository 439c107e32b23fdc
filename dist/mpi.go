//go:build (darwin || freebsd || linux || netbsd) && !android && !faketime

package dist

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// abi is how one MPI implementation spells the handles mixtune uses. MPI
// fixes the functions' names and arguments but not the types behind its
// handles: Open MPI's are pointers to global objects in libmpi (so their
// values are the addresses of symbols), MPICH's are int constants from
// its mpi.h. Both are passed in an integer register (or an 8-byte stack
// slot, of which an int callee reads the low half), so one uintptr
// carries either.
type abi struct {
	name                              string
	commWorld, errorsReturn           uintptr
	byteT, intT, floatT, doubleT      uintptr
	opSum                             uintptr
	inPlace                           uintptr // MPI_IN_PLACE
	threadFunneled                    int32
	maxLibraryVersion, maxErrorString int
}

// openMPIABI reads Open MPI's handles from the library's symbols.
func openMPIABI(lib uintptr) (abi, error) {
	a := abi{name: "Open MPI", inPlace: 1, threadFunneled: 1, maxLibraryVersion: 256, maxErrorString: 256}
	for _, s := range []struct {
		sym string
		dst *uintptr
	}{
		{"ompi_mpi_comm_world", &a.commWorld}, {"ompi_mpi_errors_return", &a.errorsReturn},
		{"ompi_mpi_byte", &a.byteT}, {"ompi_mpi_int", &a.intT}, {"ompi_mpi_float", &a.floatT},
		{"ompi_mpi_double", &a.doubleT}, {"ompi_mpi_op_sum", &a.opSum},
	} {
		p, err := purego.Dlsym(lib, s.sym)
		if err != nil {
			return a, fmt.Errorf("an Open MPI library without %s: %w", s.sym, err)
		}
		*s.dst = p
	}
	return a, nil
}

// mpichABI is MPICH's mpi.h (MPICH 3.1 to 4.x, and the libraries that
// keep its ABI: Intel MPI, Cray MPICH, MVAPICH).
var mpichABI = abi{name: "MPICH", commWorld: 0x44000000, errorsReturn: 0x54000001,
	byteT: 0x4c00010d, intT: 0x4c000405, floatT: 0x4c00040a, doubleT: 0x4c00080b, opSum: 0x58000003,
	inPlace: ^uintptr(0), threadFunneled: 1, maxLibraryVersion: 8192, maxErrorString: 1024}

// funcs are the MPI functions mixtune calls, bound with purego.
type funcs struct {
	initThread        func(argc, argv unsafe.Pointer, required int32, provided *int32) int32
	finalize          func() int32
	commRank          func(comm uintptr, rank *int32) int32
	commSize          func(comm uintptr, size *int32) int32
	commSetErrhandler func(comm, eh uintptr) int32
	allreduceInPlace  func(inPlace uintptr, recv unsafe.Pointer, count int32, dt, op, comm uintptr) int32
	bcast             func(buf unsafe.Pointer, count int32, dt uintptr, root int32, comm uintptr) int32
	allgather         func(send unsafe.Pointer, scount int32, st uintptr, recv unsafe.Pointer, rcount int32, rt, comm uintptr) int32
	allgatherv        func(send unsafe.Pointer, scount int32, st uintptr, recv unsafe.Pointer, rcounts, displs *int32, rt, comm uintptr) int32
	alltoall          func(send unsafe.Pointer, scount int32, st uintptr, recv unsafe.Pointer, rcount int32, rt, comm uintptr) int32
	abort             func(comm uintptr, code int32) int32
	libraryVersion    func(buf *byte, n *int32) int32
	errorString       func(code int32, buf *byte, n *int32) int32
}

func bind(lib uintptr) (*funcs, error) {
	f := &funcs{}
	for _, b := range []struct {
		sym string
		fn  any
	}{
		{"MPI_Init_thread", &f.initThread}, {"MPI_Finalize", &f.finalize},
		{"MPI_Comm_rank", &f.commRank}, {"MPI_Comm_size", &f.commSize},
		{"MPI_Comm_set_errhandler", &f.commSetErrhandler}, {"MPI_Allreduce", &f.allreduceInPlace},
		{"MPI_Bcast", &f.bcast}, {"MPI_Allgather", &f.allgather}, {"MPI_Allgatherv", &f.allgatherv},
		{"MPI_Alltoall", &f.alltoall}, {"MPI_Abort", &f.abort},
		{"MPI_Get_library_version", &f.libraryVersion}, {"MPI_Error_string", &f.errorString},
	} {
		// RegisterLibFunc panics on a missing symbol: look first.
		if _, err := purego.Dlsym(lib, b.sym); err != nil {
			return nil, fmt.Errorf("the library has no %s (an MPI older than MPI-3?): %w", b.sym, err)
		}
		purego.RegisterLibFunc(b.fn, lib, b.sym)
	}
	return f, nil
}

// mpiComm is a Comm over MPI_COMM_WORLD. Every MPI call runs on one
// goroutine locked to one OS thread, the thread that called
// MPI_Init_thread: MPI_THREAD_FUNNELED, which every MPI provides and
// which costs no locks inside the library, while the training goroutines
// compute on the other threads.
type mpiComm struct {
	f         *funcs
	a         abi
	rank      int
	size      int
	info      Info
	reduction Reduction
	calls     chan func()
	stopped   chan struct{}

	mu     sync.Mutex
	closed bool

	send, recv, part []float32 // scratch of the ordered reduction; MPI thread only
}

// loadLibrary dlopens the first of names that loads. RTLD_GLOBAL: Open MPI
// loads its components (mca_*.so) with dlopen, and they find libmpi's
// symbols only in the global scope.
func loadLibrary(names []string) (uintptr, string, error) {
	var errs []string
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, n, nil
		}
		errs = append(errs, err.Error())
	}
	return 0, "", errors.New(strings.Join(errs, "; "))
}

func openMPI(l Launch, opt Options) (Comm, error) {
	names := l.libraries
	if opt.Library != "" {
		names = []string{opt.Library}
	} else if p := os.Getenv("MIXTUNE_MPI_LIB"); p != "" {
		names = []string{p}
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: launched by %s as rank %d of %d, but %s", ErrNoMPI, l.Launcher, l.Rank, l.Size, fmt.Sprintf(format, args...))
	}
	// Before dlopen: UCX reads its configuration when libucs is loaded.
	quietUCX()
	lib, path, err := loadLibrary(names)
	if err != nil {
		return nil, fail("no MPI library loads (%v); install the MPI the launcher belongs to (Debian: apt-get install libopenmpi3, or libmpich12), or set MIXTUNE_MPI_LIB to its libmpi", err)
	}
	var a abi
	if _, err := purego.Dlsym(lib, "ompi_mpi_comm_world"); err == nil {
		if a, err = openMPIABI(lib); err != nil {
			return nil, fail("%s: %v", path, err)
		}
	} else if _, err := purego.Dlsym(lib, "MPIR_Err_return_comm"); err == nil {
		a = mpichABI
	} else {
		version := "unknown"
		if _, err := purego.Dlsym(lib, "MPI_Get_library_version"); err == nil {
			var get func(*byte, *int32) int32
			purego.RegisterLibFunc(&get, lib, "MPI_Get_library_version")
			buf := make([]byte, 8192) // the largest MPI_MAX_LIBRARY_VERSION_STRING
			n := int32(0)
			if get(&buf[0], &n) == 0 {
				version = firstLine(string(buf[:max(0, min(int(n), len(buf)))]))
			}
		}
		return nil, fail("%s (%s) is neither Open MPI nor of MPICH's ABI, the two mixtune speaks; set MIXTUNE_MPI_LIB to an Open MPI or MPICH libmpi", path, version)
	}
	f, err := bind(lib)
	if err != nil {
		return nil, fail("%s: %v", path, err)
	}

	c := &mpiComm{f: f, a: a, reduction: opt.Reduction, calls: make(chan func(), 4096), stopped: make(chan struct{})}
	started := make(chan error, 1)
	go c.serve(started)
	if err := <-started; err != nil {
		return nil, fail("%s: %v", path, err)
	}
	if c.size != l.Size || c.rank != l.Rank {
		// The library started a job of its own: it is not the one of the
		// launcher (an MPICH library under Open MPI's mpirun, say, makes
		// each process a world of one).
		c.Close()
		return nil, fail("%s (%s) sees rank %d of %d: the library and the launcher are from different MPI implementations; set MIXTUNE_MPI_LIB to the launcher's libmpi",
			path, a.name, c.rank, c.size)
	}
	c.info = Info{Launcher: l.Launcher, Reduction: string(c.reduction)}
	err = c.do(func() error {
		buf := make([]byte, a.maxLibraryVersion)
		n := int32(0)
		if rc := c.f.libraryVersion(&buf[0], &n); rc != 0 {
			return c.errorf("MPI_Get_library_version", rc)
		}
		c.info.Library = firstLine(string(buf[:max(0, min(int(n), len(buf)))]))
		return nil
	})
	if err != nil {
		c.Close()
		return nil, fail("%v", err)
	}
	host, _ := os.Hostname()
	hosts, err := c.Allgather([]byte(host))
	if err != nil {
		c.Close()
		return nil, fail("%v", err)
	}
	for _, h := range hosts {
		c.info.Hosts = append(c.info.Hosts, string(h))
	}
	return c, nil
}

// quietUCX keeps UCX (Open MPI's usual transport on InfiniBand) from
// installing its own SIGSEGV/SIGBUS/SIGILL/SIGFPE handlers (when libucs
// is loaded, with the MPI library or in MPI_Init):
// they replace Go's, and every nil dereference or stack growth check the
// Go runtime turns into a panic or handles itself would become a UCX
// crash report. A value the user set is kept. (Open MPI's own handlers
// are installed only where no handler is set, and Go sets them first.)
func quietUCX() {
	for k, v := range map[string]string{"UCX_HANDLE_ERRORS": "none", "UCX_ERROR_SIGNALS": "", "UCX_DEBUG_SIGNO": "0"} {
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, v)
		}
	}
}

func firstLine(s string) string {
	s = strings.TrimRight(s, "\x00")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.Join(strings.Fields(s), " ") // MPICH's has a tab
}

// serve is the MPI thread: it initializes MPI, then runs the calls sent to
// it, one at a time, until Close.
func (c *mpiComm) serve(started chan<- error) {
	runtime.LockOSThread()
	defer close(c.stopped)
	provided := int32(0)
	if rc := c.f.initThread(nil, nil, c.a.threadFunneled, &provided); rc != 0 {
		started <- c.errorf("MPI_Init_thread", rc)
		return
	}
	var rank, size int32
	switch {
	case provided < c.a.threadFunneled:
		started <- fmt.Errorf("MPI_Init_thread provides thread level %d, below MPI_THREAD_FUNNELED", provided)
	case c.f.commSetErrhandler(c.a.commWorld, c.a.errorsReturn) != 0:
		// Errors return codes, so a failure is an error message rather
		// than the library's abort.
		started <- errors.New("MPI_Comm_set_errhandler failed")
	case c.f.commRank(c.a.commWorld, &rank) != 0 || c.f.commSize(c.a.commWorld, &size) != 0:
		started <- errors.New("MPI_Comm_rank or MPI_Comm_size failed")
	default:
		c.rank, c.size = int(rank), int(size)
		started <- nil
	}
	for fn := range c.calls {
		fn()
	}
	c.f.finalize()
}

// do runs fn on the MPI thread and returns its error.
func (c *mpiComm) do(fn func() error) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errors.New("MPI is already finalized")
	}
	res := make(chan error, 1)
	c.calls <- func() { res <- fn() }
	c.mu.Unlock()
	return <-res
}

// errorf is an MPI return code as an error with the library's message.
func (c *mpiComm) errorf(fn string, rc int32) error {
	if c.f.errorString == nil {
		return fmt.Errorf("%s failed with code %d", fn, rc)
	}
	buf := make([]byte, c.a.maxErrorString)
	n := int32(0)
	if c.f.errorString(rc, &buf[0], &n) != 0 || n <= 0 {
		return fmt.Errorf("%s failed with code %d", fn, rc)
	}
	return fmt.Errorf("%s: %s", fn, strings.TrimSpace(string(buf[:min(int(n), len(buf))])))
}

func (c *mpiComm) Rank() int  { return c.rank }
func (c *mpiComm) Size() int  { return c.size }
func (c *mpiComm) Info() Info { return c.info }

// maxCount bounds the elements of one call: MPI counts are C ints.
const maxCount = 1 << 30

func (c *mpiComm) AllreduceFloat32(buf []float32) error {
	return c.do(func() error { return c.sum32(buf) })
}

func (c *mpiComm) sum32(buf []float32) error {
	if c.reduction == Ordered {
		return c.orderedSum(buf)
	}
	for off := 0; off < len(buf); off += maxCount {
		part := buf[off:min(off+maxCount, len(buf))]
		if rc := c.f.allreduceInPlace(c.a.inPlace, unsafe.Pointer(&part[0]), int32(len(part)), c.a.floatT, c.a.opSum, c.a.commWorld); rc != 0 {
			return c.errorf("MPI_Allreduce", rc)
		}
	}
	return nil
}

func (c *mpiComm) AllreduceFloat64(buf []float64) error {
	return c.do(func() error {
		for off := 0; off < len(buf); off += maxCount {
			part := buf[off:min(off+maxCount, len(buf))]
			if rc := c.f.allreduceInPlace(c.a.inPlace, unsafe.Pointer(&part[0]), int32(len(part)), c.a.doubleT, c.a.opSum, c.a.commWorld); rc != 0 {
				return c.errorf("MPI_Allreduce", rc)
			}
		}
		return nil
	})
}

// orderedPiece bounds the elements one round of the ordered reduction
// moves, and so its scratch memory (three buffers of this many floats).
const orderedPiece = 1 << 22

// orderedSum forms every element's sum in rank order, independent of the
// library's algorithms: rank j owns slice j of each piece; an all-to-all
// brings it every rank's copy of that slice, it adds them in rank order,
// and an all-gather returns the sums to everyone.
func (c *mpiComm) orderedSum(buf []float32) error {
	n := c.size
	for off := 0; off < len(buf); off += orderedPiece {
		piece := buf[off:min(off+orderedPiece, len(buf))]
		k := (len(piece) + n - 1) / n // elements each rank owns
		if len(c.send) < n*k {
			c.send, c.recv, c.part = make([]float32, n*k), make([]float32, n*k), make([]float32, k)
		}
		send, recv, part := c.send[:n*k], c.recv[:n*k], c.part[:k]
		copy(send, piece)
		clear(send[len(piece):])
		if rc := c.f.alltoall(unsafe.Pointer(&send[0]), int32(k), c.a.floatT, unsafe.Pointer(&recv[0]), int32(k), c.a.floatT, c.a.commWorld); rc != 0 {
			return c.errorf("MPI_Alltoall", rc)
		}
		copy(part, recv[:k])
		for r := 1; r < n; r++ {
			for i, v := range recv[r*k : (r+1)*k] {
				part[i] += v
			}
		}
		if rc := c.f.allgather(unsafe.Pointer(&part[0]), int32(k), c.a.floatT, unsafe.Pointer(&recv[0]), int32(k), c.a.floatT, c.a.commWorld); rc != 0 {
			return c.errorf("MPI_Allgather", rc)
		}
		copy(piece, recv)
	}
	return nil
}

// StartAllreduceFloat32 holds buf until the call has run: MPI blocks in it
// on the MPI thread while the caller computes on the others. A blocking
// call on Go memory is safe (the heap does not move); a non-blocking MPI_I*
// call would need the buffer pinned and a thread to drive progress.
func (c *mpiComm) StartAllreduceFloat32(buf []float32) Pending {
	return startSum(&c.mu, &c.closed, c.calls, "MPI is already finalized", c.sum32, buf)
}

func (c *mpiComm) Bcast(buf []byte, root int) error {
	return c.do(func() error {
		for off := 0; off < len(buf); off += maxCount {
			part := buf[off:min(off+maxCount, len(buf))]
			if rc := c.f.bcast(unsafe.Pointer(&part[0]), int32(len(part)), c.a.byteT, int32(root), c.a.commWorld); rc != 0 {
				return c.errorf("MPI_Bcast", rc)
			}
		}
		return nil
	})
}

func (c *mpiComm) BcastFloat32(buf []float32, root int) error {
	return c.do(func() error {
		for off := 0; off < len(buf); off += maxCount {
			part := buf[off:min(off+maxCount, len(buf))]
			if rc := c.f.bcast(unsafe.Pointer(&part[0]), int32(len(part)), c.a.floatT, int32(root), c.a.commWorld); rc != 0 {
				return c.errorf("MPI_Bcast", rc)
			}
		}
		return nil
	})
}

func (c *mpiComm) Allgather(b []byte) ([][]byte, error) {
	var out [][]byte
	err := c.do(func() error {
		n := c.size
		if len(b) > maxCount {
			return fmt.Errorf("allgather of %d bytes: too large", len(b))
		}
		lens := make([]int32, n)
		mine := int32(len(b))
		if rc := c.f.allgather(unsafe.Pointer(&mine), 1, c.a.intT, unsafe.Pointer(&lens[0]), 1, c.a.intT, c.a.commWorld); rc != 0 {
			return c.errorf("MPI_Allgather", rc)
		}
		displs := make([]int32, n)
		total := int64(0)
		for r, l := range lens {
			displs[r] = int32(total)
			total += int64(l)
		}
		if total > maxCount {
			return fmt.Errorf("allgather of %d bytes: too large", total)
		}
		all := make([]byte, max(total, 1))
		send := append(b[:len(b):len(b)], 0) // never empty, so &send[0] exists; the extra byte is not sent
		if rc := c.f.allgatherv(unsafe.Pointer(&send[0]), mine, c.a.byteT, unsafe.Pointer(&all[0]), &lens[0], &displs[0], c.a.byteT, c.a.commWorld); rc != 0 {
			return c.errorf("MPI_Allgatherv", rc)
		}
		out = make([][]byte, n)
		for r := range out {
			out[r] = all[displs[r] : displs[r]+lens[r] : displs[r]+lens[r]]
		}
		return nil
	})
	return out, err
}

// Abort calls MPI_Abort from the calling thread, not the MPI thread: the
// MPI thread may be blocked in a collective that will never complete,
// which is why the job is being aborted. The launcher then ends every
// rank.
func (c *mpiComm) Abort(code int) {
	c.f.abort(c.a.commWorld, int32(code))
	os.Exit(code)
}

func (c *mpiComm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.calls)
	c.mu.Unlock()
	<-c.stopped
	return nil
}
