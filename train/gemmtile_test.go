package train

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/gpu/vulkan"
)

// fakeTiles is a device's tensor-core tiles: the one in use, those that
// run, and what a timing would pick.
type fakeTiles struct {
	inUse   string
	runs    []string
	fastest string
	timed   int // ChooseTile calls
	err     error
	shapes  []vulkan.GemmShape
}

func (k *fakeTiles) TileFor(vulkan.Rounding) string { return k.inUse }

func (k *fakeTiles) UseTile(_ vulkan.Rounding, tile string) error {
	for _, t := range k.runs {
		if t == tile {
			k.inUse = tile
			return nil
		}
	}
	return errors.New("no such tile here")
}

func (k *fakeTiles) ChooseTile(_ vulkan.Rounding, shapes []vulkan.GemmShape, _ vulkan.TuneOptions) (vulkan.TileChoice, error) {
	k.timed++
	k.shapes = shapes
	if k.err != nil {
		return vulkan.TileChoice{}, k.err
	}
	k.inUse = k.fastest
	return vulkan.TileChoice{Tile: k.fastest, Reason: "auto → " + k.fastest + ": fastest", Warnings: []string{"a tile left out"}}, nil
}

// TestSettleTile: compute.gemm_tile's auto on one process and on a
// resume: a named tile is kept without timing; auto times the run's
// products and takes the fastest; a resume keeps the tile it started
// with where it still runs (timing nothing), else times again with a
// warning; a timing that fails keeps the tile in use, with a warning; a
// device without tensor-core tiles is left alone; a bad
// MIXTUNE_GPU_CALIBRATE is an input error.
func TestSettleTile(t *testing.T) {
	products := []vulkan.GemmShape{{M: 8, N: 16, K: 32, Operands: vulkan.RoundBF16, Count: 3}}
	for _, tc := range []struct {
		name, named, started string
		k                    fakeTiles
		tile, reason, warn   string
		timed                int
	}{
		{"named", "cm2-128x128", "", fakeTiles{inUse: "cm2-128x128", runs: []string{"cm2-128x128", "128x256"}, fastest: "128x256"}, "cm2-128x128", "compute.gemm_tile: cm2-128x128", "", 0},
		{"auto", "", "", fakeTiles{inUse: "cm2-128x256", runs: []string{"cm2-128x256", "128x256"}, fastest: "128x256"}, "128x256", "auto → 128x256", "a tile left out", 1},
		{"auto named", "auto", "", fakeTiles{inUse: "cm2-128x256", runs: []string{"cm2-128x256", "128x256"}, fastest: "128x256"}, "128x256", "auto → 128x256", "a tile left out", 1},
		{"resumed", "", "cm2-256x128u8", fakeTiles{inUse: "cm2-128x256", runs: []string{"cm2-128x256", "cm2-256x128u8"}, fastest: "cm2-128x256"}, "cm2-256x128u8", "the tile this run started with", "", 0},
		{"resumed elsewhere", "", "cm2-256x128u8", fakeTiles{inUse: "128x256", runs: []string{"128x256"}, fastest: "128x256"}, "128x256", "auto → 128x256", "which does not run now", 1},
		{"timing failed", "", "", fakeTiles{inUse: "cm2-128x256", runs: []string{"cm2-128x256"}, err: errors.New("out of device memory")}, "cm2-128x256", "could not be timed", "out of device memory", 1},
		{"no tensor cores", "", "", fakeTiles{}, "", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.k
			reason, warnings, err := settleTile(&k, vulkan.RoundBF16, tc.named, products, tc.started, dist.NewSingle())
			if err != nil {
				t.Fatal(err)
			}
			w := strings.Join(warnings, "\n")
			if k.inUse != tc.tile || !strings.Contains(reason, tc.reason) || (tc.reason == "") != (reason == "") || !strings.Contains(w, tc.warn) || (tc.warn == "") != (w == "") || k.timed != tc.timed {
				t.Errorf("tile %q (want %q), reason %q (want %q), warnings %q (want %q), timed %d (want %d)", k.inUse, tc.tile, reason, tc.reason, w, tc.warn, k.timed, tc.timed)
			}
			if k.timed > 0 && len(k.shapes) != 1 {
				t.Errorf("timed at %v", k.shapes)
			}
		})
	}
	t.Setenv(vulkan.TuneEnv, "always")
	k := fakeTiles{inUse: "cm2-128x256", runs: []string{"cm2-128x256"}}
	if _, _, err := settleTile(&k, vulkan.RoundBF16, "", products, "", nil); err == nil || !strings.Contains(err.Error(), vulkan.TuneEnv) || !IsInputError(err) {
		t.Errorf("bad %s: %v", vulkan.TuneEnv, err)
	}
}

// TestSettleTileRanks: under three ranks only rank 0 times; the others
// take its tile, a rank whose device does not run it keeps its own with
// a warning, and a rank 0 without tensor-core tiles leaves the others
// theirs; rank 0 broadcasts even when its own choice fails, so that no
// rank waits for ever.
func TestSettleTileRanks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ranks []fakeTiles
		want  []string
		warn  []bool
	}{
		{"rank 0's", []fakeTiles{
			{inUse: "cm2-128x256", runs: []string{"cm2-128x256", "cm2-256x128u8"}, fastest: "cm2-256x128u8"},
			{inUse: "cm2-128x256", runs: []string{"cm2-128x256", "cm2-256x128u8"}, fastest: "cm2-128x256"},
			{inUse: "128x256", runs: []string{"128x256"}, fastest: "128x256"},
		}, []string{"cm2-256x128u8", "cm2-256x128u8", "128x256"}, []bool{true, false, true}},
		{"none on rank 0", []fakeTiles{
			{},
			{inUse: "cm2-128x256", runs: []string{"cm2-128x256"}},
			{inUse: "128x256", runs: []string{"128x256"}},
		}, []string{"", "cm2-128x256", "128x256"}, []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := dist.NewLocal(len(tc.ranks))
			warnings := make([][]string, len(comms))
			errs := make([]error, len(comms))
			var wg sync.WaitGroup
			for i := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, warnings[i], errs[i] = settleTile(&tc.ranks[i], vulkan.RoundBF16, "", nil, "", comms[i])
				}()
			}
			wg.Wait()
			for i, k := range tc.ranks {
				if errs[i] != nil || k.inUse != tc.want[i] || (len(warnings[i]) > 0) != tc.warn[i] || (i > 0 && k.timed != 0) {
					t.Errorf("rank %d: %v, tile %q (want %q), warnings %q, timed %d", i, errs[i], k.inUse, tc.want[i], warnings[i], k.timed)
				}
			}
		})
	}
	// rank 0's choice fails (here its environment): it still broadcasts
	t.Setenv(vulkan.TuneEnv, "always")
	comms := dist.NewLocal(2)
	ranks := []fakeTiles{{inUse: "cm2-128x256", runs: []string{"cm2-128x256"}}, {inUse: "128x256", runs: []string{"128x256"}}}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = settleTile(&ranks[i], vulkan.RoundBF16, "", nil, "", comms[i])
		}()
	}
	wg.Wait()
	if errs[0] == nil || errs[1] != nil || ranks[1].inUse != "128x256" {
		t.Errorf("rank 0 failing: errors %v, rank 1's tile %q", errs, ranks[1].inUse)
	}
}

// TestStartedTile reads the tile a run.json records, and nothing where it
// records none, is missing or does not decode.
func TestStartedTile(t *testing.T) {
	dir := t.TempDir()
	if got := startedTile(dir); got != "" {
		t.Errorf("no run.json: %q", got)
	}
	for body, want := range map[string]string{`{"gemm_tile": "cm2-128x256u8", "engine": "vulkan: x"}`: "cm2-128x256u8", `{"engine": "cpu"}`: "", `{"gemm_tile": `: ""} {
		if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := startedTile(dir); got != want {
			t.Errorf("%s: %q, want %q", body, got, want)
		}
	}
}
