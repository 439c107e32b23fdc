package train

import (
	"context"
	"os"

	"github.com/mixtune/mixtune/device"
)

// DeviceRequest is the recipe's device choice as a device.Request, with
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER as this process sees them.
func (r *Recipe) DeviceRequest() device.Request {
	vis, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	return device.Request{
		Device: r.Device, Devices: r.Devices, MinFreeMemory: uint64(r.MinFreeMemory), NeedMemory: r.EstimateMemory(),
		Policy: r.DevicePolicy, Precision: r.Precision, LossScaling: r.AMP.LossScaling,
		PrecisionFallback: r.PrecisionFallback, AllowCPUFallback: r.AllowCPUFallback,
		CUDAVisibleDevices: vis, CUDAVisibleSet: set, CUDADeviceOrder: os.Getenv("CUDA_DEVICE_ORDER"),
	}
}

// SelectDevice resolves the device and precision before any work starts.
// A refusal (a pinned device that does not exist, too little free memory,
// bf16 on a card without it) is a config error at the device field.
func (r *Recipe) SelectDevice(inv device.Inventory) (device.Selection, error) {
	sel, err := device.Select(inv, r.DeviceRequest())
	if err != nil {
		field := "device"
		if len(r.Devices) > 0 {
			field = "devices"
		}
		return sel, r.doc.Errorf(field, "%v", err)
	}
	return sel, nil
}

// EstimateMemory is a rough upper estimate, in bytes, of what the run
// needs: weights, trainable state (value, gradient, two moments) and the
// activations one micro-batch keeps for its backward pass.
func (r *Recipe) EstimateMemory() uint64 { return r.estimateMemory(r.Train.BatchSize) }

// estimateMemory is EstimateMemory for micro-batches of batch rows.
func (r *Recipe) estimateMemory(batch int) uint64 {
	c := r.Base
	if c.HiddenSize == 0 {
		return 0
	}
	hd := c.HeadDimension()
	perLayer := 4*c.HiddenSize*c.HiddenSize + 2*c.HiddenSize*c.NumKeyValueHeads*hd + 3*c.HiddenSize*c.IntermediateSize
	params := c.NumHiddenLayers*perLayer + 2*c.VocabSize*c.HiddenSize
	weightBytes := r.Model.BaseDtype.Bytes()
	trainable := params
	if r.Adapter.Type != FullFineTune {
		// every module, when a regex picks them: an upper estimate;
		// DoRA's magnitudes (one value per output row) are included in it
		modules := len(r.Adapter.TargetModules)
		if r.Adapter.TargetRegex != "" || modules == 0 {
			modules = 7
		}
		trainable = c.NumHiddenLayers * modules * (r.Adapter.R*2 + 1) * max(c.HiddenSize, c.IntermediateSize)
	}
	rows := batch * r.Data.SeqLen
	// forward and backward buffers per row and layer, and the attention probabilities
	act := c.NumHiddenLayers * (rows*(30*c.HiddenSize+8*c.IntermediateSize) + 2*batch*c.NumAttentionHeads*r.Data.SeqLen*r.Data.SeqLen)
	act += 3 * rows * c.VocabSize
	return uint64(params*weightBytes + trainable*16 + 4*act)
}

// DeviceChoice is a resolved device: what discovery found and what the
// recipe selected from it.
type DeviceChoice struct {
	Inventory device.Inventory
	Selection device.Selection
}

// ChooseDevice discovers the machine's GPUs and selects for the recipe.
func (r *Recipe) ChooseDevice(ctx context.Context) (*DeviceChoice, error) {
	inv := device.Discover(ctx)
	sel, err := r.SelectDevice(inv)
	if err != nil {
		return nil, err
	}
	return &DeviceChoice{Inventory: inv, Selection: sel}, nil
}
