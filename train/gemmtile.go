package train

import (
	"bytes"
	"fmt"
	"os"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/gpu/vulkan"
)

// GemmTileAuto is compute.gemm_tile's default: the Vulkan engine times
// every tensor-core tile the device runs at the run's own products and
// takes the fastest (vulkan.Kernels.ChooseTile).
const GemmTileAuto = "auto"

// autoTile reports whether compute.gemm_tile leaves the tile to the
// measurement: "" or "auto".
func autoTile(tile string) bool { return tile == "" || tile == GemmTileAuto }

// tileMessage is how many bytes rank 0's tile name takes in its
// broadcast: every tile name is shorter.
const tileMessage = 64

// tileKernels is what settleTile needs of the engine's kernels
// (vulkan.Kernels).
type tileKernels interface {
	TileFor(f vulkan.Rounding) string
	UseTile(f vulkan.Rounding, tile string) error
	ChooseTile(f vulkan.Rounding, shapes []vulkan.GemmShape, opt vulkan.TuneOptions) (vulkan.TileChoice, error)
}

// settleTile fixes the tensor-core tile of the run's 16-bit products on
// g where compute.gemm_tile (named) is auto: on a resume, the tile the
// run started with (run.json's gemm_tile, in started); under several
// ranks, the one rank 0 chose, so that every rank sums as one; else the
// fastest at products, the trainer's GEMMs. It records the tile and why
// in g (run.json, the banner) and returns warnings. A named tile was put
// in use when g was opened; fp32 runs have no 16-bit products.
func (g *gpuEngine) settleTile(named string, low amp.Format, products []vulkan.GemmShape, started string, comm dist.Comm) ([]string, error) {
	formats := tensorFormats(low)
	if len(formats) == 0 {
		return nil, nil
	}
	var warnings []string
	var err error
	g.tileReason, warnings, err = settleTile(g.eng.Kernels, formats[0], named, products, started, comm)
	g.tile, g.variant = g.eng.Kernels.TileFor(formats[0]), g.kernelNames()
	return warnings, err
}

// settleTile is gpuEngine.settleTile on ks for products of format f: why
// the tile in use after it was taken, and warnings.
func settleTile(ks tileKernels, f vulkan.Rounding, named string, products []vulkan.GemmShape, started string, comm dist.Comm) (string, []string, error) {
	if !autoTile(named) {
		return "compute.gemm_tile: " + named, nil, nil
	}
	ranks := comm != nil && comm.Size() > 1
	if ranks && comm.Rank() != 0 {
		msg := make([]byte, tileMessage)
		if err := comm.Bcast(msg, 0); err != nil {
			return "", nil, fmt.Errorf("share the GEMM tile: %w", err)
		}
		tile := string(bytes.TrimRight(msg, "\x00"))
		if tile == "" || ks.TileFor(f) == "" {
			return "", nil, nil // rank 0 has no tensor-core tile, or this rank none
		}
		if err := ks.UseTile(f, tile); err != nil {
			return ks.TileFor(f) + ": rank 0's tile does not run here", []string{fmt.Sprintf("rank 0's GEMM tile %s does not run on this rank's device (%v): this rank keeps %s, and its sums differ from rank 0's in the last bits", tile, err, ks.TileFor(f))}, nil
		}
		return fmt.Sprintf("auto → %s: picked by rank 0", tile), nil, nil
	}
	reason, warnings, err := chooseTile(ks, f, products, started)
	if ranks { // always, so that no rank waits for a message that never comes
		msg := make([]byte, tileMessage)
		if err == nil {
			copy(msg, ks.TileFor(f))
		}
		if berr := comm.Bcast(msg, 0); berr != nil && err == nil {
			err = fmt.Errorf("share the GEMM tile: %w", berr)
		}
	}
	return reason, warnings, err
}

// chooseTile is settleTile's choice on one process, or rank 0.
func chooseTile(ks tileKernels, f vulkan.Rounding, products []vulkan.GemmShape, started string) (string, []string, error) {
	if ks.TileFor(f) == "" {
		return "", nil, nil // no tensor-core variant runs f here
	}
	var warnings []string
	if started != "" {
		err := ks.UseTile(f, started)
		if err == nil {
			return fmt.Sprintf("auto → %s: the tile this run started with (run.json), kept so that the resumed run computes as it began", started), nil, nil
		}
		warnings = append(warnings, fmt.Sprintf("this run started on GEMM tile %s, which does not run now (%v): auto picks again, and the resumed run's numbers differ from an uninterrupted run's in the last bits", started, err))
	}
	opt, err := vulkan.TuneOptionsFromEnv(os.Getenv)
	if err != nil {
		return "", warnings, inputError(err)
	}
	choice, err := ks.ChooseTile(f, products, opt)
	if err != nil { // no room for the operands beside the run's buffers, say
		return ks.TileFor(f) + ": the tiles could not be timed", append(warnings, fmt.Sprintf("could not time the GEMM tiles (%v): %s stays", err, ks.TileFor(f))), nil
	}
	return choice.Reason, append(warnings, choice.Warnings...), nil
}

// startedTile is the tensor-core tile a run directory's run.json says the
// run's 16-bit products started on; "" where it names none.
func startedTile(dir string) string {
	var m struct {
		GemmTile string `json:"gemm_tile"`
	}
	readRunJSON(dir, &m)
	return m.GemmTile
}

// namedTile is the tile compute.gemm_tile names for the kernels to build
// first: "" for auto, whose choice comes once the run's products are known.
func namedTile(tile string) string {
	if autoTile(tile) {
		return ""
	}
	return tile
}

// settleSplit decides, where compute.split_dkv is auto, whether the
// tensor-core attention's dK/dV kernel runs as one or two by timing both
// at uses, the trainer's backward passes (vulkan.Kernels.ChooseSplitDKV).
// Both give the same bits, so nothing is recorded for a resume, and a
// timing that fails only warns.
func (g *gpuEngine) settleSplit(mode SplitDKV, low amp.Format, uses []vulkan.AttentionUse) []string {
	if mode != SplitDKVAuto || len(tensorFormats(low)) == 0 { // fp32: no tensor-core attention to time
		return nil
	}
	opt, err := vulkan.TuneOptionsFromEnv(os.Getenv)
	if err != nil {
		return []string{err.Error()} // with gemm_tile: auto, settleTile refused it as bad input already
	}
	c, err := g.eng.Kernels.ChooseSplitDKV(uses, opt)
	if err != nil {
		return []string{fmt.Sprintf("could not time attention's dK/dV kernel joint and split (%v): it stays joint", err)}
	}
	g.splitReason, g.variant = c.Reason, g.kernelNames()
	return c.Warnings
}
