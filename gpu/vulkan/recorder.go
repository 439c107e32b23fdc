package vulkan

import (
	"fmt"
	"math"
	"math/bits"
	"unsafe"
)

// setsPerPool is how many descriptor sets one descriptor pool holds; a
// Recorder adds pools as a batch needs them.
const (
	setsPerPool    = 64
	buffersPerPool = setsPerPool * 8
)

// fenceTimeout bounds a fence wait, in nanoseconds (lavapipe's big GEMMs
// take seconds; a lost device should not hang forever).
const fenceTimeout = 600e9

// Recorder records dispatches and copies into one command buffer and
// submits them together: Submit waits for the batch on a fence, then the
// Recorder can record the next one. Between two recorded commands it puts
// a memory barrier (compute and transfer writes made visible to compute
// and transfer reads and writes), and after the last a barrier to the
// host, so Buffer.Read sees the results. Flush hands the commands
// recorded so far to the device without waiting, so it works on them
// while the host records the rest; the batch still ends at Submit. A
// Recorder belongs to one goroutine.
type Recorder struct {
	d       *Device
	pool    ndHandle
	cb      handle   // the command buffer recorded next: cbs[cur]
	cbs     []handle // every command buffer allocated from pool
	cur     int
	flushed int // command buffers of this batch submitted by Flush
	// flushedCmds is how many of the batch's commands they hold.
	flushedCmds int
	flushes     int // Flush's submits since NewRecorder
	fence       ndHandle
	dpools      []ndHandle
	dpUsed      int // pools [0, dpUsed) have been allocated from in this batch
	recording   bool
	commands    int
	timing      *timer // nil: no timestamps recorded
	scope       Scope  // what the commands recorded next belong to
	stamps      int    // timestamp writes recorded since NewRecorder
	// part is the scratch the batch's commands share (split-K's partial
	// products); retired are smaller ones it replaced during the batch,
	// which commands already recorded still use: freed at its end.
	part    *Buffer
	retired []*Buffer
}

// scratch is a device buffer of at least size bytes for one command's
// intermediate values, shared by every command recorded: the barrier
// between two commands orders one's use of it after the other's. A need
// larger than the buffer replaces it (sized to the next power of two),
// the old one freed when the batch is done.
func (r *Recorder) scratch(size uint64) (*Buffer, error) {
	if r.part != nil && uint64(r.part.Size()) >= size {
		return r.part, nil
	}
	if size > math.MaxInt32 {
		return nil, fmt.Errorf("vulkan: %d bytes of scratch", size)
	}
	b, err := r.d.NewBuffer(1 << bits.Len64(max(size, 1<<16)-1))
	if err != nil {
		return nil, err
	}
	if r.part != nil {
		r.retired = append(r.retired, r.part)
	}
	r.part = b
	return b, nil
}

// NewRecorder makes a command pool, a command buffer and a fence.
func (d *Device) NewRecorder() (*Recorder, error) {
	f := &d.fn
	r := &Recorder{d: d}
	cpci := &commandPoolCreateInfo{SType: stCommandPoolCreateInfo, QueueFamilyIndex: d.family}
	if err := check("vkCreateCommandPool", call(f.createCommandPool, d.h, uintptr(unsafe.Pointer(cpci)), 0, uintptr(unsafe.Pointer(&r.pool)))); err != nil {
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	cbai := &commandBufferAllocateInfo{SType: stCommandBufferAllocateInfo, CommandPool: r.pool, Level: commandBufferLevelPrimary, CommandBufferCount: 1}
	if err := check("vkAllocateCommandBuffers", call(f.allocateCommandBuffers, d.h, uintptr(unsafe.Pointer(cbai)), uintptr(unsafe.Pointer(&r.cb)))); err != nil {
		r.Close()
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	r.cbs = []handle{r.cb}
	fci := &fenceCreateInfo{SType: stFenceCreateInfo}
	if err := check("vkCreateFence", call(f.createFence, d.h, uintptr(unsafe.Pointer(fci)), 0, uintptr(unsafe.Pointer(&r.fence)))); err != nil {
		r.Close()
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	return r, nil
}

// Len is the number of commands recorded since the last Submit.
func (r *Recorder) Len() int { return r.commands }

// Unflushed is the number of commands recorded since the last Flush or
// Submit.
func (r *Recorder) Unflushed() int { return r.commands - r.flushedCmds }

// Flushes counts the command buffers Flush has submitted since
// NewRecorder.
func (r *Recorder) Flushes() int { return r.flushes }

// Flush submits the commands recorded since the last Flush or Submit
// without waiting for them, so the device works on them while the host
// records the rest of the batch; Submit then waits for all of it. The
// commands run in the order recorded, with the same barriers between
// them (the next command buffer starts with one), so the results are
// those of one batch. Until Submit returns, the host must not write a
// buffer that a flushed command uses. With timestamps on (Time) it does
// nothing: a timed batch is one command buffer.
func (r *Recorder) Flush() error {
	if !r.recording || r.timing != nil || r.commands == r.flushedCmds {
		return nil
	}
	f := &r.d.fn
	if err := check("vkEndCommandBuffer", call(f.endCommandBuffer, r.cb)); err != nil {
		r.Discard()
		return fmt.Errorf("vulkan: %w", err)
	}
	cb := r.cb
	si := &submitInfo{SType: stSubmitInfo, CommandBufferCount: 1, PCommandBuffers: &cb}
	r.d.submitMu.Lock()
	err := check("vkQueueSubmit", call(f.queueSubmit, r.d.queue, 1, uintptr(unsafe.Pointer(si)), 0))
	r.d.submitMu.Unlock()
	r.recording = false
	if err != nil {
		r.Discard()
		return fmt.Errorf("vulkan: flushing %d commands: %w", r.commands-r.flushedCmds, err)
	}
	r.flushed++
	r.flushes++
	r.flushedCmds = r.commands
	if err := r.advance(); err != nil {
		r.Discard()
		return err
	}
	return nil
}

// advance makes the pool's next command buffer the one recorded next,
// allocating it the first time.
func (r *Recorder) advance() error {
	if r.cur+1 == len(r.cbs) {
		cbai := &commandBufferAllocateInfo{SType: stCommandBufferAllocateInfo, CommandPool: r.pool, Level: commandBufferLevelPrimary, CommandBufferCount: 1}
		var cb handle
		if err := check("vkAllocateCommandBuffers", call(r.d.fn.allocateCommandBuffers, r.d.h, uintptr(unsafe.Pointer(cbai)), uintptr(unsafe.Pointer(&cb)))); err != nil {
			return fmt.Errorf("vulkan: %w", err)
		}
		r.cbs = append(r.cbs, cb)
	}
	r.cur++
	r.cb = r.cbs[r.cur]
	return nil
}

// begin starts recording, or puts a barrier after the previous command.
func (r *Recorder) begin() error {
	if r.cb == 0 {
		return fmt.Errorf("vulkan: recorder is closed")
	}
	if !r.recording {
		bi := &commandBufferBeginInfo{SType: stCommandBufferBeginInfo, Flags: commandBufferOneTimeSubmit}
		if err := check("vkBeginCommandBuffer", call(r.d.fn.beginCommandBuffer, r.cb, uintptr(unsafe.Pointer(bi)))); err != nil {
			return fmt.Errorf("vulkan: %w", err)
		}
		r.recording = true
		if r.flushed > 0 {
			// After commands flushed in earlier command buffers: a barrier
			// orders this one after them, as within one.
			r.barrier(accessShaderWrite|accessTransferWrite, accessShaderRead|accessShaderWrite|accessTransferRead|accessTransferWrite,
				pipelineStageCompute|pipelineStageTransfer, pipelineStageCompute|pipelineStageTransfer)
			return nil
		}
		if r.timing != nil {
			return r.stamp(pipelineStageTopOfPipe) // the batch's start
		}
		return nil
	}
	r.barrier(accessShaderWrite|accessTransferWrite, accessShaderRead|accessShaderWrite|accessTransferRead|accessTransferWrite,
		pipelineStageCompute|pipelineStageTransfer, pipelineStageCompute|pipelineStageTransfer)
	return nil
}

func (r *Recorder) barrier(srcAccess, dstAccess, srcStage, dstStage uint32) {
	mb := &memoryBarrier{SType: stMemoryBarrier, SrcAccessMask: srcAccess, DstAccessMask: dstAccess}
	call(r.d.fn.cmdPipelineBarrier, r.cb, uintptr(srcStage), uintptr(dstStage), 0, 1, uintptr(unsafe.Pointer(mb)), 0, 0, 0, 0)
}

// descriptorSet allocates a set of layout from the batch's pools, adding
// a pool when the current one is full.
func (r *Recorder) descriptorSet(layout ndHandle) (ndHandle, error) {
	f := &r.d.fn
	r.dpUsed = max(r.dpUsed, 1)
	for {
		fresh := false
		if r.dpUsed > len(r.dpools) {
			sizes := &descriptorPoolSize{Type: descriptorTypeStorageBuffer, DescriptorCount: buffersPerPool}
			dpci := &descriptorPoolCreateInfo{SType: stDescriptorPoolCreateInfo, MaxSets: setsPerPool, PoolSizeCount: 1, PPoolSizes: sizes}
			var p ndHandle
			if err := check("vkCreateDescriptorPool", call(f.createDescriptorPool, r.d.h, uintptr(unsafe.Pointer(dpci)), 0, uintptr(unsafe.Pointer(&p)))); err != nil {
				return 0, err
			}
			r.dpools = append(r.dpools, p)
			fresh = true
		}
		lay := layout
		ai := &descriptorSetAllocateInfo{SType: stDescriptorSetAllocateInfo, DescriptorPool: r.dpools[r.dpUsed-1], DescriptorSetCount: 1, PSetLayouts: &lay}
		var set ndHandle
		res := Result(int32(call(f.allocateDescriptorSets, r.d.h, uintptr(unsafe.Pointer(ai)), uintptr(unsafe.Pointer(&set)))))
		switch {
		case res == Success:
			return set, nil
		case (res == ErrorOutOfPoolMemory || res == ErrorFragmentedPool) && !fresh:
			r.dpUsed++ // this pool is full: the next one
		default:
			return 0, &Error{Call: "vkAllocateDescriptorSets", Result: res}
		}
	}
}

// Dispatch records k over groups (x, y, z) workgroups with bufs bound at
// bindings 0.. and push as its push constants.
func (r *Recorder) Dispatch(k *Kernel, bufs []*Buffer, push []byte, x, y, z uint32) error {
	return r.dispatch(k, bufs, push, x, y, z, 0)
}

// dispatch is Dispatch of a kernel doing flops floating-point operations
// (0: unknown), which a timed batch reports.
func (r *Recorder) dispatch(k *Kernel, bufs []*Buffer, push []byte, x, y, z uint32, flops float64) error {
	if k == nil || k.pipeline == 0 {
		return fmt.Errorf("vulkan: Dispatch: kernel is closed or nil")
	}
	if k.d != r.d {
		return fmt.Errorf("vulkan: Dispatch %s: kernel belongs to another device", k.name)
	}
	if len(bufs) != k.buffers {
		return fmt.Errorf("vulkan: Dispatch %s: %d buffers given, the kernel binds %d", k.name, len(bufs), k.buffers)
	}
	if len(push) != k.pushSize {
		return fmt.Errorf("vulkan: Dispatch %s: %d bytes of push constants given, the kernel takes %d", k.name, len(push), k.pushSize)
	}
	lim := r.d.Physical.MaxWorkgroupCount
	if x == 0 || y == 0 || z == 0 || x > lim[0] || y > lim[1] || z > lim[2] {
		return fmt.Errorf("vulkan: Dispatch %s: %d×%d×%d workgroups; each must be 1 to %v", k.name, x, y, z, lim)
	}
	for i, b := range bufs {
		if b == nil || b.h == 0 {
			return fmt.Errorf("vulkan: Dispatch %s: buffer %d: %w", k.name, i, ErrFreed)
		}
		if b.d != r.d {
			return fmt.Errorf("vulkan: Dispatch %s: buffer %d belongs to another device", k.name, i)
		}
	}
	if err := r.begin(); err != nil {
		return err
	}
	f := &r.d.fn
	if k.buffers > 0 {
		set, err := r.descriptorSet(k.setLay)
		if err != nil {
			return fmt.Errorf("vulkan: Dispatch %s: %w", k.name, err)
		}
		infos := make([]descriptorBufferInfo, len(bufs))
		writes := make([]writeDescriptorSet, len(bufs))
		for i, b := range bufs {
			infos[i] = descriptorBufferInfo{Buffer: b.h, Range: wholeSize}
			writes[i] = writeDescriptorSet{SType: stWriteDescriptorSet, DstSet: set, DstBinding: uint32(i), DescriptorCount: 1, DescriptorType: descriptorTypeStorageBuffer, PBufferInfo: &infos[i]}
		}
		call(f.updateDescriptorSets, r.d.h, uintptr(len(writes)), uintptr(unsafe.Pointer(&writes[0])), 0, 0)
		call(f.cmdBindPipeline, r.cb, pipelineBindPointCompute, uintptr(k.pipeline))
		call(f.cmdBindDescriptorSets, r.cb, pipelineBindPointCompute, uintptr(k.layout), 0, 1, uintptr(unsafe.Pointer(&set)), 0, 0)
	} else {
		call(f.cmdBindPipeline, r.cb, pipelineBindPointCompute, uintptr(k.pipeline))
	}
	if k.pushSize > 0 {
		call(f.cmdPushConstants, r.cb, uintptr(k.layout), shaderStageCompute, 0, uintptr(len(push)), uintptr(unsafe.Pointer(&push[0])))
	}
	if err := r.timeCommand(k.name, flops, func() { call(f.cmdDispatch, r.cb, uintptr(x), uintptr(y), uintptr(z)) }); err != nil {
		return fmt.Errorf("vulkan: Dispatch %s: %w", k.name, err)
	}
	r.commands++
	return nil
}

// Copy records a copy of size bytes from src at srcOff to dst at dstOff.
func (r *Recorder) Copy(dst *Buffer, dstOff uint64, src *Buffer, srcOff, size uint64) error {
	for _, b := range []*Buffer{dst, src} {
		if b == nil || b.h == 0 {
			return fmt.Errorf("vulkan: Copy: %w", ErrFreed)
		}
	}
	if size == 0 || srcOff+size > src.size || dstOff+size > dst.size {
		return fmt.Errorf("vulkan: Copy: %d bytes from offset %d of %d to offset %d of %d do not fit", size, srcOff, src.size, dstOff, dst.size)
	}
	if err := r.begin(); err != nil {
		return err
	}
	region := &bufferCopy{SrcOffset: srcOff, DstOffset: dstOff, Size: size}
	if err := r.timeCommand("copy", 0, func() {
		call(r.d.fn.cmdCopyBuffer, r.cb, uintptr(src.h), uintptr(dst.h), 1, uintptr(unsafe.Pointer(region)))
	}); err != nil {
		return fmt.Errorf("vulkan: Copy: %w", err)
	}
	r.commands++
	return nil
}

// Submit ends the batch, submits it, waits for it on the fence and
// readies the Recorder for the next batch. With nothing recorded it does nothing.
func (r *Recorder) Submit() error {
	if !r.recording {
		if r.flushed == 0 {
			return nil
		}
		// Everything was flushed: a command buffer of barriers only, so
		// the fence and the host barrier cover the flushed work.
		if err := r.begin(); err != nil {
			return err
		}
	}
	d, f := r.d, &r.d.fn
	r.barrier(accessShaderWrite|accessTransferWrite, accessHostRead, pipelineStageCompute|pipelineStageTransfer, pipelineStageHost)
	if r.timing != nil {
		if err := r.stamp(pipelineStageBottomOfPipe); err != nil { // the batch's end
			r.reset()
			return err
		}
	}
	r.recording = false
	n := r.commands
	defer r.reset()
	if err := check("vkEndCommandBuffer", call(f.endCommandBuffer, r.cb)); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	cb := r.cb
	si := &submitInfo{SType: stSubmitInfo, CommandBufferCount: 1, PCommandBuffers: &cb}
	d.submitMu.Lock()
	err := check("vkQueueSubmit", call(f.queueSubmit, d.queue, 1, uintptr(unsafe.Pointer(si)), uintptr(r.fence)))
	d.submitMu.Unlock()
	if err != nil {
		return fmt.Errorf("vulkan: batch of %d commands: %w", n, err)
	}
	// The fence's signal waits for every command submitted before it on
	// the queue too, the flushed ones included.
	fence := r.fence
	if err := check("vkWaitForFences", call(f.waitForFences, d.h, 1, uintptr(unsafe.Pointer(&fence)), 1, uintptr(uint64(fenceTimeout)))); err != nil {
		return fmt.Errorf("vulkan: batch of %d commands: %w", n, err)
	}
	if err := check("vkResetFences", call(f.resetFences, d.h, 1, uintptr(unsafe.Pointer(&fence)))); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	if r.timing != nil {
		return r.readTimes()
	}
	return nil
}

// Discard drops a batch recorded but not submitted (recording failed
// part way), so that the next batch starts clean. Commands already flushed
// run to completion first (their effects stay).
func (r *Recorder) Discard() {
	if r.flushed > 0 {
		r.waitFlushed()
	}
	if r.recording || r.flushed > 0 || r.commands > 0 {
		r.reset()
	}
}

// waitFlushed waits until the flushed command buffers have run: an empty
// one submitted behind them with the fence (the one being recorded, if
// any, is dropped).
func (r *Recorder) waitFlushed() {
	f := &r.d.fn
	if r.recording {
		call(f.endCommandBuffer, r.cb)
		r.recording = false
		if r.advance() != nil {
			return
		}
	}
	bi := &commandBufferBeginInfo{SType: stCommandBufferBeginInfo, Flags: commandBufferOneTimeSubmit}
	if check("vkBeginCommandBuffer", call(f.beginCommandBuffer, r.cb, uintptr(unsafe.Pointer(bi)))) != nil {
		return
	}
	call(f.endCommandBuffer, r.cb)
	cb, fence := r.cb, r.fence
	si := &submitInfo{SType: stSubmitInfo, CommandBufferCount: 1, PCommandBuffers: &cb}
	r.d.submitMu.Lock()
	err := check("vkQueueSubmit", call(f.queueSubmit, r.d.queue, 1, uintptr(unsafe.Pointer(si)), uintptr(fence)))
	r.d.submitMu.Unlock()
	if err == nil {
		call(f.waitForFences, r.d.h, 1, uintptr(unsafe.Pointer(&fence)), 1, uintptr(uint64(fenceTimeout)))
		call(f.resetFences, r.d.h, 1, uintptr(unsafe.Pointer(&fence)))
	}
}

// reset returns the command buffer and descriptor sets for reuse.
func (r *Recorder) reset() {
	f := &r.d.fn
	call(f.resetCommandPool, r.d.h, uintptr(r.pool), 0)
	for _, p := range r.dpools[:r.dpUsed] {
		call(f.resetDescriptorPool, r.d.h, uintptr(p), 0)
	}
	r.dpUsed, r.commands, r.recording, r.scope = 0, 0, false, Scope{}
	r.cur, r.flushed, r.flushedCmds = 0, 0, 0
	if len(r.cbs) > 0 {
		r.cb = r.cbs[0]
	}
	for _, b := range r.retired {
		b.Free()
	}
	r.retired = nil
	if r.timing != nil {
		r.timing.used, r.timing.cmds = 0, r.timing.cmds[:0]
	}
}

// Close frees the recorder's objects. A batch recorded but not submitted is dropped.
func (r *Recorder) Close() {
	if r.flushed > 0 && r.cb != 0 {
		r.waitFlushed() // the pool's command buffers may still be running
	}
	d, f := r.d, &r.d.fn
	r.stopTiming()
	for _, b := range append(r.retired, r.part) {
		if b != nil {
			b.Free()
		}
	}
	r.retired, r.part = nil, nil
	if r.fence != 0 {
		call(f.destroyFence, d.h, uintptr(r.fence), 0)
	}
	for _, p := range r.dpools {
		call(f.destroyDescriptorPool, d.h, uintptr(p), 0)
	}
	if r.pool != 0 {
		call(f.destroyCommandPool, d.h, uintptr(r.pool), 0)
	}
	r.fence, r.dpools, r.pool, r.cb, r.cbs = 0, nil, 0, 0, nil
}
