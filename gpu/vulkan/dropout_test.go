package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDropoutMask checks the mask kernel bit for bit against Go's
// math/rand/v2 PCG drawn as nn's keepMask draws it, on rows that end
// inside a word and rows long enough that the kernel jumps the LCG
// hundreds of steps, with keys, ids and row offsets that set high bits
// (the row index wraps at 32 bits, as the seed's uint32(row) does).
func TestDropoutMask(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	for _, m := range []DropoutMask{
		{Rows: 1, Cols: 1, Key: 7, ID: 1, P: 0.5},
		{Rows: 3, Cols: 70, Key: 7, ID: 3, RowOffset: 5, P: 0.1},
		{Rows: 4, Cols: 1000, Key: 0xfedcba9876543210, ID: 0x7fffffff, RowOffset: math.MaxUint32 - 1, P: 0.3},
		{Rows: 2, Cols: 64, Key: 1 << 63, ID: 12, P: 0.999},
		{Rows: 2, Cols: 33, Key: 42, ID: 2, P: 1e-9},
	} {
		t.Run(fmt.Sprintf("%dx%d_p%g", m.Rows, m.Cols, m.P), func(t *testing.T) {
			M, err := d.NewBuffer(4 * m.Words())
			must(t, err)
			defer M.Free()
			r, err := d.NewRecorder()
			must(t, err)
			defer r.Close()
			must(t, ks.Dropout(r, m, M))
			must(t, r.Submit())
			words := make([]uint32, m.Words())
			b := make([]byte, 4*len(words))
			must(t, M.Read(0, b))
			for i := range words {
				words[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
			}
			wpr := m.wordsPerRow()
			kept := 0
			for row := range m.Rows {
				rng := rand.NewPCG(m.Key, uint64(m.ID)<<32|uint64(uint32(row+m.RowOffset)))
				for j := range m.Cols {
					want := float64(rng.Uint64()>>11)/(1<<53) >= m.P
					got := words[row*wpr+j/32]>>(j%32)&1 == 1
					if got != want {
						t.Fatalf("row %d column %d: kept %v, want %v", row, j, got, want)
					}
					if got {
						kept++
					}
				}
				if pad := words[row*wpr+wpr-1] >> (m.Cols % 32); m.Cols%32 != 0 && pad != 0 {
					t.Fatalf("row %d: bits past the row's end: %#x", row, pad)
				}
			}
			t.Logf("kept %d of %d", kept, m.Rows*m.Cols)
		})
	}
}

// TestDropoutApply checks y = x·scale where kept, 0 elsewhere, bit for bit
// (one correctly rounded product), on a mask written by hand.
func TestDropoutApply(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const rows, cols = 3, 37
	wpr := (cols + 31) / 32
	mask := make([]byte, 4*rows*wpr)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range mask {
		mask[i] = byte(rng.Uint32())
	}
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	scale := float32(1 / (1 - 0.3))
	M, err := d.NewBuffer(len(mask))
	must(t, err)
	defer M.Free()
	X, err := d.NewBuffer(4 * len(x))
	must(t, err)
	defer X.Free()
	must(t, M.Write(0, mask))
	must(t, X.WriteFloat32(0, x))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	must(t, ks.DropoutApply(r, M, X, X, rows, cols, scale)) // in place
	must(t, r.Submit())
	got := make([]float32, len(x))
	must(t, X.ReadFloat32(0, got))
	for i, v := range x {
		row, j := i/cols, i%cols
		want := float32(0)
		if mask[4*(row*wpr+j/32)+j%32/8]>>(j%8)&1 == 1 {
			want = v * scale
		}
		if math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
}
