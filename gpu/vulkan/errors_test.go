package vulkan

import (
	"errors"
	"strings"
	"testing"
)

func TestLoadMissingLibrary(t *testing.T) {
	_, err := LoadFrom("libvulkan-does-not-exist.so.9")
	if !errors.Is(err, ErrNoLoader) {
		t.Fatalf("LoadFrom(missing) = %v, want an error wrapping ErrNoLoader", err)
	}
	if _, err := LoadFrom(); !errors.Is(err, ErrNoLoader) {
		t.Fatalf("LoadFrom() = %v, want ErrNoLoader", err)
	}
}

func TestResultString(t *testing.T) {
	for _, c := range []struct {
		r    Result
		want string
	}{{ErrorOutOfDeviceMemory, "VK_ERROR_OUT_OF_DEVICE_MEMORY"}, {ErrorDeviceLost, "VK_ERROR_DEVICE_LOST"}, {Result(-77), "VkResult(-77)"}} {
		if got := c.r.String(); got != c.want {
			t.Errorf("%d: %q, want %q", int32(c.r), got, c.want)
		}
	}
	err := check("vkQueueSubmit", uintptr(uint32(0xfffffffc))) // -4 as the C ABI returns it
	var ve *Error
	if !errors.As(err, &ve) || ve.Result != ErrorDeviceLost || err.Error() != "vkQueueSubmit: VK_ERROR_DEVICE_LOST" {
		t.Fatalf("check(-4) = %v", err)
	}
}

func TestSelect(t *testing.T) {
	devs := []*PhysicalDevice{
		{Index: 0, Name: "a", UUID: [16]byte{0xab, 0xcd, 1}, PCIBusID: "0000:01:00.0"},
		{Index: 1, Name: "b", UUID: [16]byte{0xab, 0xce, 2}, PCIBusID: "0000:41:00.0"},
		{Index: 2, Name: "c", UUID: [16]byte{0x12}},
	}
	for _, c := range []struct {
		spec, want, err string
	}{
		{"1", "b", ""},
		{"3", "", "out of range"},
		{"-1", "", "out of range"},
		{"GPU-abcd01", "a", ""},
		{"abce", "b", ""},
		{devs[2].UUIDString(), "c", ""},
		{"GPU-ab", "", "2 devices match"},
		{"GPU-ff", "", "no device matches"},
		{"41:00.0", "b", ""},
		{"0000:01:00.0", "a", ""},
		{"0000:02:00.0", "", "no device matches"},
		{"", "", "empty"},
		{"GPU-", "", "empty UUID"},
	} {
		got, err := Select(devs, c.spec)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Select(%q) = %v, %v; want an error containing %q", c.spec, got, err, c.err)
			}
		case err != nil || got.Name != c.want:
			t.Errorf("Select(%q) = %v, %v; want %s", c.spec, got, err, c.want)
		}
	}
	if s := devs[0].UUIDString(); s != "GPU-abcd0100-0000-0000-0000-000000000000" {
		t.Errorf("UUIDString = %s", s)
	}
	nv := &PhysicalDevice{VendorID: 0x10de, DriverVersion: 550<<22 | 54<<14 | 15<<6}
	if s := nv.DriverVersionString(); s != "550.54.15.0" {
		t.Errorf("NVIDIA driver version = %s, want 550.54.15.0", s)
	}
}

// TestSuballocator checks first-fit carving with alignment and coalescing
// on release, without a device.
func TestSuballocator(t *testing.T) {
	b := &block{size: 1024, free: []span{{0, 1024}}}
	take := func(size, align, want uint64) {
		t.Helper()
		off, ok := b.take(size, align)
		if !ok || off != want {
			t.Fatalf("take(%d, %d) = %d, %v; want %d; free %v", size, align, off, ok, want, b.free)
		}
	}
	take(100, 1, 0)
	take(100, 256, 256) // leaves [100, 256) free
	take(50, 4, 100)    // first fit: the gap
	take(600, 8, 360)
	if _, ok := b.take(200, 1); ok {
		t.Fatalf("take(200) fits in %v", b.free)
	}
	b.release(100, 50)
	b.release(0, 100)
	if len(b.free) != 3 || b.free[0] != (span{0, 256}) {
		t.Fatalf("after releasing [0,150): free %v, want [0,256) merged first", b.free)
	}
	b.release(256, 100)
	b.release(360, 600)
	if len(b.free) != 1 || b.free[0] != (span{0, 1024}) {
		t.Fatalf("all released: free %v, want one span [0,1024)", b.free)
	}
}

// TestBadArguments: kernels and buffers refuse bad arguments with errors
// that say what is wrong, before anything reaches the driver.
func TestBadArguments(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	buf := func(n int) *Buffer {
		b, err := d.NewBuffer(n)
		must(t, err)
		t.Cleanup(b.Free)
		return b
	}
	A, B, C := buf(4*64), buf(4*64), buf(4*64)
	freed := buf(16)
	freed.Free()
	ok := GemmArgs{M: 8, N: 8, K: 8, Alpha: 1, A: A, B: B, C: C, Lda: 8, Ldb: 8, Ldc: 8}
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for _, c := range []struct {
		name string
		edit func(g *GemmArgs)
		want string
	}{
		{"negative", func(g *GemmArgs) { g.K = -1 }, "negative size"},
		{"lda", func(g *GemmArgs) { g.Lda = 7 }, "leading dimension 7"},
		{"A too small", func(g *GemmArgs) { g.M = 9 }, "needs 288 bytes"},
		{"B offset", func(g *GemmArgs) { g.BOff = 1 }, "needs 260 bytes"},
		{"transposed A", func(g *GemmArgs) { g.TransA, g.M, g.Lda = true, 9, 8 }, "leading dimension 8 for 9 columns"},
		{"aliasing", func(g *GemmArgs) { g.C = g.A }, "must not share"},
		{"freed", func(g *GemmArgs) { g.B = freed }, "already freed"},
		{"half", func(g *GemmArgs) { g.B16, g.BHalf = true, Half(7) }, "unknown 16-bit format"},
	} {
		g := ok
		c.edit(&g)
		if err := ks.Gemm(r, g); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if r.Len() != 0 {
		t.Errorf("refused calls recorded %d commands", r.Len())
	}
	must(t, ks.Gemm(r, GemmArgs{M: 0, N: 5, K: 3}))                                                      // empty: nothing to do
	must(t, ks.Gemm(r, GemmArgs{M: 8, N: 8, K: 8, A: A, B: B, C: C, Lda: 8, Ldb: 8, Ldc: 8, B16: true})) // 16-bit B needs half the bytes
	must(t, r.Submit())

	if err := ks.Round16(r, Half(3), A, B, 4); err == nil || !strings.Contains(err.Error(), "unknown 16-bit format") {
		t.Errorf("Round16 with a bad format: %v", err)
	}
	if err := ks.Round16(r, BF16, A, buf(4), 3); err == nil || !strings.Contains(err.Error(), "y:") {
		t.Errorf("Round16 into a short buffer: %v", err)
	}
	if err := r.Dispatch(ks.round16, []*Buffer{A}, make([]byte, roundPush), 1, 1, 1); err == nil || !strings.Contains(err.Error(), "1 buffers given, the kernel binds 2") {
		t.Errorf("Dispatch with one buffer: %v", err)
	}
	if err := r.Dispatch(ks.round16, []*Buffer{A, B}, make([]byte, 4), 1, 1, 1); err == nil || !strings.Contains(err.Error(), "push constants") {
		t.Errorf("Dispatch with short push constants: %v", err)
	}
	if err := r.Dispatch(ks.round16, []*Buffer{A, B}, make([]byte, roundPush), 0, 1, 1); err == nil || !strings.Contains(err.Error(), "workgroups") {
		t.Errorf("Dispatch with 0 workgroups: %v", err)
	}
	if err := ks.RMSNorm(r, A, B, A, 2, 8, 1e-6); err == nil || !strings.Contains(err.Error(), "must not share") {
		t.Errorf("RMSNorm in place: %v", err)
	}
	if err := ks.RMSNorm(r, A, B, C, 9, 8, 1e-6); err == nil || !strings.Contains(err.Error(), "needs 288 bytes") {
		t.Errorf("RMSNorm past the end of x: %v", err)
	}
	if err := ks.AdamW(r, AdamWStep{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, A, B, C, freed, 4); err == nil {
		t.Error("AdamW with zero bias corrections succeeded")
	}
	if err := ks.AdamW(r, AdamWStep{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, BiasCorrection1: 0.1, BiasCorrection2: 0.001}, A, B, C, A, 4); err == nil || !strings.Contains(err.Error(), "four buffers") {
		t.Errorf("AdamW with v = param: %v", err)
	}
	if r.Len() != 0 {
		t.Errorf("refused calls recorded %d commands", r.Len())
	}
	if _, err := d.NewBuffer(0); err == nil {
		t.Error("NewBuffer(0) succeeded")
	}
	if _, err := d.NewBuffer(int(d.Physical.MaxStorageBufferRange) + 1); err == nil || !strings.Contains(err.Error(), "maxStorageBufferRange") {
		t.Errorf("NewBuffer past maxStorageBufferRange: %v", err)
	}
	if err := A.Write(250, make([]byte, 8)); err == nil || !strings.Contains(err.Error(), "outside the 256-byte buffer") {
		t.Errorf("Write past the end: %v", err)
	}
	if err := freed.Read(0, make([]byte, 4)); !errors.Is(err, ErrFreed) {
		t.Errorf("Read of a freed buffer: %v", err)
	}
	for _, bad := range [][]byte{nil, make([]byte, 21), make([]byte, 24)} {
		if _, err := d.NewKernel(KernelSpec{Name: "bad", SPIRV: bad, Buffers: 1}); err == nil || !strings.Contains(err.Error(), "SPIR-V") {
			t.Errorf("NewKernel(%d bytes of junk): %v", len(bad), err)
		}
	}
	if _, err := d.NewKernel(KernelSpec{Name: "push", SPIRV: make([]byte, 24), PushSize: 6}); err == nil || !strings.Contains(err.Error(), "multiple of 4") {
		t.Errorf("NewKernel with 6 bytes of push constants: %v", err)
	}
}

// TestBuffers: round trips through the mapping and through staging
// buffers, the allocator reusing freed ranges, and a buffer too big for a
// shared block getting its own.
func TestBuffers(t *testing.T) {
	for _, staged := range []bool{false, true} {
		e := openTest(t)
		d := e.dev
		d.stageAlways = staged
		before := d.alloc.inUse()
		usedBefore, _ := d.MemoryUse()
		var bufs []*Buffer
		for i := range 20 {
			b, err := d.NewBuffer(1000 + 37*i)
			must(t, err)
			data := make([]byte, b.Size())
			for j := range data {
				data[j] = byte(i + j)
			}
			must(t, b.Write(0, data))
			bufs = append(bufs, b)
		}
		t.Logf("staged %v: host-visible device memory: %v", staged, bufs[0].HostVisible())
		if staged && bufs[0].HostVisible() {
			t.Fatal("stageAlways left the buffer mapped")
		}
		for i, b := range bufs {
			got := make([]byte, b.Size()-10)
			must(t, b.Read(10, got))
			for j, v := range got {
				if v != byte(i+j+10) {
					t.Fatalf("staged %v: buffer %d byte %d: %d, want %d", staged, i, j+10, v, byte(i+j+10))
				}
			}
		}
		big, err := d.NewBuffer(defaultBlockSize/4 + 1)
		must(t, err)
		if !big.blk.dedicated {
			t.Error("a buffer over a quarter block shares a block")
		}
		// MemoryUse counts each device buffer's span (its size rounded up
		// to the driver's granularity), and staging buffers not at all
		var sizes uint64
		for _, b := range append(bufs, big) {
			sizes += uint64(b.Size())
		}
		now, peak := d.MemoryUse()
		if held := now - usedBefore; held < sizes || held > sizes+21*4096 || peak < now {
			t.Errorf("MemoryUse: %d bytes held for buffers of %d (peak %d)", held, sizes, peak)
		}
		big.Free()
		for _, b := range bufs {
			b.Free()
		}
		if after := d.alloc.inUse(); after != before {
			t.Errorf("%d bytes in use after freeing everything; %d before", after, before)
		}
		if after, peak2 := d.MemoryUse(); after != usedBefore || peak2 != peak {
			t.Errorf("MemoryUse after freeing: %d held (%d before), peak %d (was %d)", after, usedBefore, peak2, peak)
		}
	}
}

// TestPipelineCache: the cache's data after building the kernels seeds a
// second device, whose kernels then build and run.
func TestPipelineCache(t *testing.T) {
	e, _ := openKernels(t)
	data, err := e.dev.PipelineCacheData()
	must(t, err)
	// VkPipelineCacheHeaderVersionOne: 32 bytes, header length 32, version 1.
	if len(data) < 32 || data[0] != 32 || data[4] != 1 {
		t.Fatalf("pipeline cache data: %d bytes, header % x", len(data), data[:min(len(data), 8)])
	}
	d2, err := e.inst.OpenDeviceCache(e.dev.Physical, data)
	must(t, err)
	defer d2.Close()
	ks2, err := NewKernels(d2)
	must(t, err)
	defer ks2.Close()
	x, err := d2.NewBuffer(8)
	must(t, err)
	defer x.Free()
	y, err := d2.NewBuffer(4)
	must(t, err)
	defer y.Free()
	must(t, x.WriteFloat32(0, []float32{1, -2}))
	r, err := d2.NewRecorder()
	must(t, err)
	defer r.Close()
	must(t, ks2.Round16(r, BF16, x, y, 2))
	must(t, r.Submit())
	got := make([]uint16, 2)
	must(t, y.ReadUint16(0, got))
	if got[0] != 0x3f80 || got[1] != 0xc000 {
		t.Fatalf("bf16(1, -2) on the cache-seeded device = %#04x, want 0x3f80 0xc000", got)
	}
	t.Logf("pipeline cache: %d bytes", len(data))
}
