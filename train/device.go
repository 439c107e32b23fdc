package train

import (
	"context"
	"os"

	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/nn"
)

// DeviceRequest is the recipe's device choice as a device.Request, with
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER as this process sees them.
func (r *Recipe) DeviceRequest() device.Request { return r.deviceRequest(1) }

// deviceRequest is DeviceRequest for a job with ranks ranks on this host,
// each of which takes a GPU of its own (auto takes the ranks best).
func (r *Recipe) deviceRequest(ranks int) device.Request {
	vis, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	return device.Request{Count: ranks,
		Device: r.Device, Devices: r.Devices, MinFreeMemory: uint64(r.MinFreeMemory), NeedMemory: r.EstimateMemory(),
		Policy: r.DevicePolicy, Precision: r.Precision, LossScaling: r.AMP.LossScaling,
		PrecisionFallback: r.PrecisionFallback, AllowCPUFallback: r.AllowCPUFallback, GPUEngine: r.Compute.Device != ComputeCPU,
		CUDAVisibleDevices: vis, CUDAVisibleSet: set, CUDADeviceOrder: os.Getenv("CUDA_DEVICE_ORDER"),
	}
}

// SelectDevice resolves the device and precision before any work starts.
// A refusal (a pinned device that does not exist, too little free memory,
// bf16 on a card without it) is a config error at the device field.
func (r *Recipe) SelectDevice(inv device.Inventory) (device.Selection, error) {
	return r.SelectDevices(inv, 1)
}

// SelectDevices is SelectDevice for ranks ranks on this host.
func (r *Recipe) SelectDevices(inv device.Inventory, ranks int) (device.Selection, error) {
	sel, err := device.Select(inv, r.deviceRequest(ranks))
	if err != nil {
		field := "device"
		if len(r.Devices) > 0 {
			field = "devices"
		}
		return sel, r.doc.Errorf(field, "%v", err)
	}
	return sel, nil
}

// EstimateMemory estimates, in bytes, the run's peak memory: weights,
// trainable state (value, gradient, two moments), the buffers of the
// training graph and of the evaluation graph, and the runtime. It is
// calibrated against measured peak RSS on the CPU (see estimateMemory).
func (r *Recipe) EstimateMemory() uint64 { return r.estimateMemory(r.Train.BatchSize) }

// Calibration of estimateMemory, from peak RSS measured with `mixtune
// bench` at SmolLM2-135M's shape (bf16 on a bf16 base, 512 to 2048
// tokens, with and without activation checkpointing; AMD EPYC Zen 3,
// 2026-11-26), with the graphs' memory plan (nn.Builder.PlanMemory): a
// step holds what the backward pass reads, about 16 values of width d
// and 5 of width f per token and layer, and a few gradients at a time;
// a checkpointed layer's graph holds its forward values together, and
// its backward pass's, so about two layers' worth. Counted values are taken 1.25 times (the
// Go heap's slack); the process itself, with the data, the tokenizer and
// the decoder, takes a few hundred MiB. At 2048 tokens the estimate is
// 5.9 GiB against 4.3 measured, 1.9 against 1.2 with checkpointing.
// (Attention's [T, T] probabilities are counted only below the tiled
// kernel's length, which keeps none.)
const (
	graphOverhead = 1.25
	runtimeBytes  = 400 << 20
)

// estimateMemory is EstimateMemory for micro-batches of batch rows.
func (r *Recipe) estimateMemory(batch int) uint64 {
	weights, graphs := r.memoryParts(batch)
	return uint64(weights + graphs)
}

// memoryParts are estimateMemory's two parts: the weights (the base, the
// trainable ones with their gradients and optimizer state) with the
// runtime, and the graphs' values.
func (r *Recipe) memoryParts(batch int) (weights, graphs float64) {
	c := r.Base
	if c.HiddenSize == 0 {
		return 0, 0
	}
	hd := c.HeadDimension()
	d, f, l := float64(c.HiddenSize), float64(c.IntermediateSize), float64(c.NumHiddenLayers)
	q, kv := float64(c.NumAttentionHeads*hd), float64(c.NumKeyValueHeads*hd)
	perLayer := 2*d*q + 2*d*kv + 3*d*f
	params := l*perLayer + 2*float64(c.VocabSize)*d
	trainable := params
	if r.Adapter.Type != FullFineTune {
		// every module, when a regex picks them: an upper estimate;
		// DoRA's magnitudes (one value per output row) are included in it
		modules := float64(len(r.Adapter.TargetModules))
		if r.Adapter.TargetRegex != "" || modules == 0 {
			modules = 7
		}
		trainable = l * modules * float64(r.Adapter.R*2+1) * max(d, f)
	}
	rows, t := float64(batch*r.Data.SeqLen), float64(r.Data.SeqLen)
	// values a training step keeps per layer for the backward pass (about
	// 16 of width d and 5 of width f per token) and the attention
	// probabilities, plus one block of the fused head's logits (never the
	// whole [rows, vocab]); an evaluation graph keeps no value past its
	// last reader: about one layer's
	head := min(rows, float64(nn.HeadChunk(c.VocabSize))) * float64(c.VocabSize)
	layer := rows * (16*d + 5*f)
	if nn.AttentionKeepsProbabilities(r.Data.SeqLen) {
		layer += 2 * float64(batch*c.NumAttentionHeads) * t * t
	}
	train, eval := l*layer+head, layer+head
	if r.Compute.ActivationCheckpointing {
		// each layer's input, output and input gradient, and one layer's
		// graph (nn.Checkpoint), its forward values all live together
		train = l*3*rows*d + 2*layer + head
	}
	if r.Data.Validation == "" && r.Data.ValidationSplit == 0 {
		eval = 0
	}
	base := params * float64(r.Model.BaseDtype.Bytes())
	if r.Model.Quantize != "" || c.BnB4 != nil {
		// the projections 4-bit: half a byte per value, plus one absmax
		// per 64 (a byte with double quantization, else four)
		proj := l * perLayer
		base += proj * (0.5 + 4.0/64 - float64(r.Model.BaseDtype.Bytes()))
	}
	return base + trainable*16 + runtimeBytes, graphOverhead * 4 * (train + eval)
}

// hostMemory is estimateMemory for a run whose graphs run on a GPU: the
// weights, the trainable ones' gradients and optimizer state, and the
// runtime, without the graphs' values.
func (r *Recipe) hostMemory() uint64 {
	weights, _ := r.memoryParts(0)
	return uint64(weights)
}

// DeviceChoice is a resolved device: what discovery found and what the
// recipe selected from it.
type DeviceChoice struct {
	Inventory device.Inventory
	Selection device.Selection
}

// ChooseDevice discovers the machine's GPUs and selects for the recipe,
// for ranks ranks of a data-parallel job on this host (1 for one process).
func (r *Recipe) ChooseDevice(ctx context.Context, ranks int) (*DeviceChoice, error) {
	inv := device.Discover(ctx)
	sel, err := r.SelectDevices(inv, ranks)
	if err != nil {
		return nil, err
	}
	return &DeviceChoice{Inventory: inv, Selection: sel}, nil
}
