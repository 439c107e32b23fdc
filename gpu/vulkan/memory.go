package vulkan

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"unsafe"
)

// defaultBlockSize is the size of the memory blocks buffers are carved
// from; a buffer larger than a quarter of it gets a block of its own.
const defaultBlockSize = 64 << 20

// memKind says what a buffer's memory is for.
type memKind int

const (
	kindDevice  memKind = iota // device-local: kernels' operands
	kindStaging                // host-visible, coherent: uploads and downloads
)

// allocator suballocates VkDeviceMemory blocks: first fit over a sorted
// free list per block, freed ranges coalesced with their neighbours.
type allocator struct {
	d         *Device
	blockSize uint64
	mu        sync.Mutex
	blocks    []*block
	// used and peak count the bytes of device buffers (not staging ones)
	// held now and at most since the device was opened.
	used, peak uint64
}

// MemoryUse returns the bytes the device's buffers hold now and the most
// they have held since the device was opened (staging buffers, and what
// suballocation leaves between buffers, not counted).
func (d *Device) MemoryUse() (now, peak uint64) {
	a := d.alloc
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used, a.peak
}

// count adds delta bytes of device buffers.
func (a *allocator) count(delta int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.used = uint64(int64(a.used) + delta)
	a.peak = max(a.peak, a.used)
}

type block struct {
	mem       ndHandle
	typ       uint32
	size      uint64
	mapped    unsafe.Pointer // whole block, when host-visible
	free      []span         // sorted by offset
	dedicated bool
}

type span struct{ off, size uint64 }

func newAllocator(d *Device) *allocator { return &allocator{d: d, blockSize: defaultBlockSize} }

// memoryType picks the memory type index for kind among the allowed bits.
// Device memory prefers device-local types that are not host-visible
// (discrete GPUs' VRAM), then any device-local one (lavapipe and
// integrated GPUs, where it is also host-visible); staging memory needs
// host-visible and coherent, preferring cached.
func (a *allocator) memoryType(bits uint32, kind memKind) (uint32, error) {
	mp := &a.d.mem
	types := mp.MemoryTypes[:min(mp.MemoryTypeCount, maxMemoryTypes)]
	pick := func(must, mustNot uint32) int {
		for i, t := range types {
			if bits&(1<<i) != 0 && t.PropertyFlags&must == must && t.PropertyFlags&mustNot == 0 {
				return i
			}
		}
		return -1
	}
	var i int
	if kind == kindDevice {
		if i = pick(memoryPropertyDeviceLocal, memoryPropertyHostVisible); i < 0 {
			if i = pick(memoryPropertyDeviceLocal, 0); i < 0 {
				i = pick(0, 0)
			}
		}
	} else {
		hc := uint32(memoryPropertyHostVisible | memoryPropertyHostCoherent)
		if i = pick(hc|memoryPropertyHostCached, 0); i < 0 {
			i = pick(hc, 0)
		}
	}
	if i < 0 {
		return 0, fmt.Errorf("vulkan: no memory type fits (allowed types %#x)", bits)
	}
	return uint32(i), nil
}

// alloc finds size bytes aligned to align in a block of memory type typ.
func (a *allocator) alloc(typ uint32, size, align uint64) (*block, uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if size > a.blockSize/4 {
		b, err := a.newBlock(typ, size, true)
		if err != nil {
			return nil, 0, err
		}
		b.free = nil
		return b, 0, nil
	}
	for _, b := range a.blocks {
		if b.typ != typ || b.dedicated {
			continue
		}
		if off, ok := b.take(size, align); ok {
			return b, off, nil
		}
	}
	b, err := a.newBlock(typ, a.blockSize, false)
	if err != nil {
		return nil, 0, err
	}
	off, ok := b.take(size, align)
	if !ok {
		return nil, 0, fmt.Errorf("vulkan: allocator: %d bytes do not fit a fresh %d-byte block", size, a.blockSize)
	}
	return b, off, nil
}

// newBlock allocates (and maps, when host-visible) one block.
func (a *allocator) newBlock(typ uint32, size uint64, dedicated bool) (*block, error) {
	d := a.d
	ai := &memoryAllocateInfo{SType: stMemoryAllocateInfo, AllocationSize: size, MemoryTypeIndex: typ}
	b := &block{typ: typ, size: size, dedicated: dedicated, free: []span{{0, size}}}
	if err := check("vkAllocateMemory", call(d.fn.allocateMemory, d.h, uintptr(unsafe.Pointer(ai)), 0, uintptr(unsafe.Pointer(&b.mem)))); err != nil {
		return nil, fmt.Errorf("vulkan: %d bytes of memory type %d: %w", size, typ, err)
	}
	if d.mem.MemoryTypes[typ].PropertyFlags&memoryPropertyHostVisible != 0 {
		var p unsafe.Pointer
		if err := check("vkMapMemory", call(d.fn.mapMemory, d.h, uintptr(b.mem), 0, uintptr(wholeSize), 0, uintptr(unsafe.Pointer(&p)))); err != nil {
			call(d.fn.freeMemory, d.h, uintptr(b.mem), 0)
			return nil, fmt.Errorf("vulkan: %w", err)
		}
		b.mapped = p
	}
	a.blocks = append(a.blocks, b)
	return b, nil
}

// take carves size bytes aligned to align from the first free span that fits.
func (b *block) take(size, align uint64) (uint64, bool) {
	for i, s := range b.free {
		off := (s.off + align - 1) / align * align
		if off+size > s.off+s.size {
			continue
		}
		var rest []span
		if off > s.off {
			rest = append(rest, span{s.off, off - s.off})
		}
		if end := s.off + s.size; off+size < end {
			rest = append(rest, span{off + size, end - off - size})
		}
		b.free = append(b.free[:i], append(rest, b.free[i+1:]...)...)
		return off, true
	}
	return 0, false
}

// release returns [off, off+size) to b, merging it with adjacent free spans.
func (b *block) release(off, size uint64) {
	i := sort.Search(len(b.free), func(i int) bool { return b.free[i].off > off })
	b.free = append(b.free, span{})
	copy(b.free[i+1:], b.free[i:])
	b.free[i] = span{off, size}
	if i+1 < len(b.free) && b.free[i].off+b.free[i].size == b.free[i+1].off {
		b.free[i].size += b.free[i+1].size
		b.free = append(b.free[:i+1], b.free[i+2:]...)
	}
	if i > 0 && b.free[i-1].off+b.free[i-1].size == b.free[i].off {
		b.free[i-1].size += b.free[i].size
		b.free = append(b.free[:i], b.free[i+1:]...)
	}
}

// freeRange gives a buffer's range back; a dedicated block is freed whole.
func (a *allocator) freeRange(b *block, off, size uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.dedicated {
		for i, x := range a.blocks {
			if x == b {
				a.blocks = append(a.blocks[:i], a.blocks[i+1:]...)
				break
			}
		}
		call(a.d.fn.freeMemory, a.d.h, uintptr(b.mem), 0)
		return
	}
	b.release(off, size)
}

// inUse is the number of bytes handed out, over all blocks.
func (a *allocator) inUse() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n uint64
	for _, b := range a.blocks {
		n += b.size
		for _, s := range b.free {
			n -= s.size
		}
	}
	return n
}

func (a *allocator) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, b := range a.blocks {
		call(a.d.fn.freeMemory, a.d.h, uintptr(b.mem), 0)
	}
	a.blocks = nil
}

// Buffer is a storage buffer on a Device.
type Buffer struct {
	d         *Device
	h         ndHandle
	size      uint64
	blk       *block
	off, span uint64
	host      []byte // the mapped bytes when the memory is host-visible
	counted   bool   // a device buffer: its span is in the allocator's count
}

// ErrBufferTooLarge is wrapped by NewBuffer's error for a buffer larger
// than the device's maxStorageBufferRange.
var ErrBufferTooLarge = errors.New("larger than the device's largest storage buffer")

// ErrFreed is returned by operations on a freed Buffer.
var ErrFreed = errors.New("vulkan: buffer already freed")

// NewBuffer makes a size-byte storage buffer in device-local memory.
// Where that memory is also host-visible (lavapipe, integrated GPUs) Write
// and Read copy through the mapping; elsewhere through a staging buffer.
func (d *Device) NewBuffer(size int) (*Buffer, error) { return d.newBuffer(size, kindDevice) }

func (d *Device) newBuffer(size int, kind memKind) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("vulkan: NewBuffer: size %d must be positive", size)
	}
	if max := d.Physical.MaxStorageBufferRange; max != 0 && uint64(size) > uint64(max) {
		return nil, fmt.Errorf("vulkan: NewBuffer: %d bytes exceed the device's maxStorageBufferRange %d: %w", size, max, ErrBufferTooLarge)
	}
	ci := &bufferCreateInfo{
		SType: stBufferCreateInfo, Size: uint64(size),
		Usage:       bufferUsageStorage | bufferUsageTransferSrc | bufferUsageTransferDst,
		SharingMode: sharingModeExclusive,
	}
	b := &Buffer{d: d, size: uint64(size)}
	if err := check("vkCreateBuffer", call(d.fn.createBuffer, d.h, uintptr(unsafe.Pointer(ci)), 0, uintptr(unsafe.Pointer(&b.h)))); err != nil {
		return nil, fmt.Errorf("vulkan: %d-byte buffer: %w", size, err)
	}
	var req memoryRequirements
	call(d.fn.getBufferMemoryRequirements, d.h, uintptr(b.h), uintptr(unsafe.Pointer(&req)))
	typ, err := d.alloc.memoryType(req.MemoryTypeBits, kind)
	if err == nil {
		b.blk, b.off, err = d.alloc.alloc(typ, req.Size, max(req.Alignment, 1))
	}
	if err != nil {
		call(d.fn.destroyBuffer, d.h, uintptr(b.h), 0)
		return nil, err
	}
	b.span = req.Size
	if kind == kindDevice {
		b.counted = true
		d.alloc.count(int64(b.span))
	}
	if err := check("vkBindBufferMemory", call(d.fn.bindBufferMemory, d.h, uintptr(b.h), uintptr(b.blk.mem), uintptr(b.off))); err != nil {
		b.Free()
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	coherent := d.mem.MemoryTypes[typ].PropertyFlags&memoryPropertyHostCoherent != 0
	if b.blk.mapped != nil && coherent && !(kind == kindDevice && d.stageAlways) { // non-coherent memory would need flushes: stage instead
		b.host = unsafe.Slice((*byte)(unsafe.Add(b.blk.mapped, b.off)), size)
	}
	return b, nil
}

// Size is the buffer's size in bytes.
func (b *Buffer) Size() int { return int(b.size) }

// HostVisible reports whether the buffer's memory is mapped into this process.
func (b *Buffer) HostVisible() bool { return b.host != nil }

// Free destroys the buffer and returns its memory. No submitted work may
// still use it.
func (b *Buffer) Free() {
	if b.h == 0 {
		return
	}
	call(b.d.fn.destroyBuffer, b.d.h, uintptr(b.h), 0)
	b.d.alloc.freeRange(b.blk, b.off, b.span)
	if b.counted {
		b.d.alloc.count(-int64(b.span))
	}
	b.h, b.host = 0, nil
}

func (b *Buffer) bounds(op string, off, n int) error {
	if b.h == 0 {
		return fmt.Errorf("%s: %w", op, ErrFreed)
	}
	if off < 0 || n < 0 || uint64(off)+uint64(n) > b.size {
		return fmt.Errorf("vulkan: %s: bytes [%d, %d) outside the %d-byte buffer", op, off, off+n, b.size)
	}
	return nil
}

// Write copies data into the buffer at byte offset off. No submitted work
// may be using the buffer.
func (b *Buffer) Write(off int, data []byte) error {
	if err := b.bounds("Buffer.Write", off, len(data)); err != nil || len(data) == 0 {
		return err
	}
	if b.host != nil {
		copy(b.host[off:], data)
		return nil
	}
	st, err := b.d.newBuffer(len(data), kindStaging)
	if err != nil {
		return fmt.Errorf("vulkan: Buffer.Write staging: %w", err)
	}
	defer st.Free()
	copy(st.host, data)
	return b.d.copyNow(b, uint64(off), st, 0, uint64(len(data)))
}

// Read copies len(data) bytes from byte offset off of the buffer. It
// must not be called while submitted work writes the buffer.
func (b *Buffer) Read(off int, data []byte) error {
	if err := b.bounds("Buffer.Read", off, len(data)); err != nil || len(data) == 0 {
		return err
	}
	if b.host != nil {
		copy(data, b.host[off:])
		return nil
	}
	st, err := b.d.newBuffer(len(data), kindStaging)
	if err != nil {
		return fmt.Errorf("vulkan: Buffer.Read staging: %w", err)
	}
	defer st.Free()
	if err := b.d.copyNow(st, 0, b, uint64(off), uint64(len(data))); err != nil {
		return err
	}
	copy(data, st.host)
	return nil
}

// WriteFloat32 writes xs at element offset off (4-byte elements).
func (b *Buffer) WriteFloat32(off int, xs []float32) error {
	return b.Write(4*off, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(xs))), 4*len(xs)))
}

// ReadFloat32 fills xs from element offset off.
func (b *Buffer) ReadFloat32(off int, xs []float32) error {
	return b.Read(4*off, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(xs))), 4*len(xs)))
}

// WriteUint16 writes hs at element offset off (2-byte elements).
func (b *Buffer) WriteUint16(off int, hs []uint16) error {
	return b.Write(2*off, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(hs))), 2*len(hs)))
}

// ReadUint16 fills hs from element offset off.
func (b *Buffer) ReadUint16(off int, hs []uint16) error {
	return b.Read(2*off, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(hs))), 2*len(hs)))
}

// copyNow copies size bytes between buffers and waits for the copy.
func (d *Device) copyNow(dst *Buffer, dstOff uint64, src *Buffer, srcOff, size uint64) error {
	r, err := d.NewRecorder()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Copy(dst, dstOff, src, srcOff, size); err != nil {
		return err
	}
	return r.Submit()
}
