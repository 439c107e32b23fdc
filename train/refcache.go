package train

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/model"
)

// The reference cache keeps a full fine-tuning run's reference
// log-probabilities (each pair's chosen and rejected sums under the base
// model, computed before the first step) on disk, as data.Cache keeps
// tokens: a rerun, a resumed run or another run on the same model and
// pairs reads them instead of running the reference pass over every pair.
//
// An entry is keyed by everything its values follow from: the base
// model's weights (a SHA-256 of every value as loaded, so a changed
// checkpoint, base dtype or quantization misses) and architecture, the
// pairs' token ids and targets, data.seq_len, the pairs per reference
// batch, the precision policy, the GEMM kernels, the bf16 product path,
// the engine and the mixtune binary (other code may round otherwise). The
// entry's name is a hash of its key and the key is stored in it under a
// checksum: an entry that fails its checksum, holds another key or is of
// another version is not used; the values are computed again, the entry
// rewritten, and a warning says why. Computing again is always right,
// while refusing would stop a run for an entry mixtune can mend itself.

// referenceMagic starts every entry; its version changes whenever the
// encoding, or what an entry's values are, changes.
const referenceMagic = "mixtune reference 1\n"

// referenceCache is where a run's reference entry is, and what it is
// keyed by; a zero one (data.cache off, or no user cache directory)
// caches nothing.
type referenceCache struct {
	entry, key string
}

// newReferenceCache keys the reference values of the pair sets (training,
// then validation) for components c, in batches of rows pairs.
func newReferenceCache(r *Recipe, c *components, rows int, sets ...[]data.Pair) referenceCache {
	if !r.Data.Cache {
		return referenceCache{}
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return referenceCache{}
	}
	var k strings.Builder
	fmt.Fprintf(&k, "mixtune %s %s\n", Version, executableHash())
	fmt.Fprintf(&k, "model weights sha256 %s\nmodel config %s\n", weightsSum(c.model), configKey(c.model.Config))
	fmt.Fprintf(&k, "pairs sha256 %s\n", pairsSum(sets...))
	fmt.Fprintf(&k, "seq_len %d, %d pairs a batch, checkpointing %v\n", r.Data.SeqLen, rows, r.Compute.ActivationCheckpointing)
	fmt.Fprintf(&k, "precision %+v\nblas %s\nbf16 %s\nengine %s\n", c.policy, c.eng.BLAS.Name(), c.bf16.path, c.engineName())
	h := sha256.Sum256([]byte(referenceMagic + k.String()))
	return referenceCache{entry: filepath.Join(dir, "mixtune", "reference", hex.EncodeToString(h[:16])+".reference"), key: k.String()}
}

// configKey writes the architecture's every field; its pointers'
// values, not their addresses, which differ from run to run.
func configKey(cfg model.Config) string {
	rope, bnb := "none", "none"
	if cfg.RopeScaling != nil {
		rope = fmt.Sprintf("%+v", *cfg.RopeScaling)
	}
	if cfg.BnB4 != nil {
		bnb = fmt.Sprintf("%+v", *cfg.BnB4)
	}
	cfg.RopeScaling, cfg.BnB4 = nil, nil
	return fmt.Sprintf("%+v rope_scaling %s bnb4 %s", cfg, rope, bnb)
}

// weightsSum is a SHA-256 of every weight's name, shape, format and
// values, in name order.
func weightsSum(m *model.Model) string {
	h := sha256.New()
	w := bufio.NewWriterSize(h, 1<<16)
	var buf [4]byte
	for _, name := range sortedKeys(m.Weights) {
		t := m.Weights[name]
		fmt.Fprintf(w, "%s %v ", name, t.Shape)
		switch {
		case t.Q4 != nil:
			fmt.Fprintf(w, "q4 %d\n", len(t.Q4))
			w.Write(t.Q4)
		case t.Bits != nil:
			fmt.Fprintf(w, "%v %d\n", t.Format, len(t.Bits))
			for _, b := range t.Bits {
				binary.LittleEndian.PutUint16(buf[:2], b)
				w.Write(buf[:2])
			}
		default:
			fmt.Fprintf(w, "fp32 %d\n", len(t.Data))
			for _, v := range t.Data {
				binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
				w.Write(buf[:])
			}
		}
	}
	w.Flush()
	return hex.EncodeToString(h.Sum(nil))
}

// pairsSum is a SHA-256 of the pair sets' token ids and targets, in order.
func pairsSum(sets ...[]data.Pair) string {
	h := sha256.New()
	for i, ps := range sets {
		fmt.Fprintf(h, "set %d: %d pairs\n", i, len(ps))
		for _, p := range ps {
			for _, e := range []data.Example{p.Chosen, p.Rejected} {
				writeExample(h, e)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeExample(h hash.Hash, e data.Example) {
	var buf [binary.MaxVarintLen64]byte
	h.Write(buf[:binary.PutUvarint(buf[:], uint64(len(e.IDs)))])
	for i, id := range e.IDs {
		h.Write(buf[:binary.PutUvarint(buf[:], uint64(id))])
		t := byte(0)
		if e.Target[i] {
			t = 1
		}
		h.Write([]byte{t})
	}
}

// load sets the pair sets' Reference from the entry. It reports whether
// it did; rejected, if not nil, says why an entry that was there was not
// used (a missing entry is no rejection).
func (rc referenceCache) load(sets ...[]data.Pair) (hit bool, rejected error) {
	if rc.entry == "" {
		return false, nil
	}
	n := 0
	for _, ps := range sets {
		n += len(ps)
	}
	vals, err := rc.read(n)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reference cache entry %s: %w", rc.entry, err)
	}
	for _, ps := range sets {
		for i := range ps {
			ps[i].Reference, vals = vals[:2:2], vals[2:]
		}
	}
	return true, nil
}

// read decodes the entry: the magic, the key's length and bytes, the
// number of pairs, their chosen and rejected values as float64 bits, then
// a SHA-256 of everything before it.
func (rc referenceCache) read(pairs int) ([]float64, error) {
	b, err := readlimit.ReadFile(rc.entry, readlimit.TokenCache)
	if err != nil {
		return nil, err
	}
	if len(b) < len(referenceMagic)+sha256.Size || !bytes.HasPrefix(b, []byte(referenceMagic)) {
		return nil, fmt.Errorf("not an entry of this version (want %q)", strings.TrimSpace(referenceMagic))
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("fails its checksum")
	}
	r := bytes.NewReader(body[len(referenceMagic):])
	kl, err := binary.ReadUvarint(r)
	if err != nil || kl > uint64(r.Len()) {
		return nil, errors.New("malformed")
	}
	stored := make([]byte, kl)
	io.ReadFull(r, stored)
	if string(stored) != rc.key {
		return nil, errors.New("holds the values of another model, other pairs or other settings (a copied or renamed entry)")
	}
	n, err := binary.ReadUvarint(r)
	if err != nil || n != uint64(pairs) || uint64(r.Len()) != 16*n {
		return nil, fmt.Errorf("malformed: %d pairs' values for %d pairs", n, pairs)
	}
	vals := make([]float64, 2*n)
	for i := range vals {
		var bits [8]byte
		io.ReadFull(r, bits[:])
		vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(bits[:]))
	}
	return vals, nil
}

// store writes the pair sets' Reference values as an entry. Failing to
// write the cache is not an error: the run has its values.
func (rc referenceCache) store(sets ...[]data.Pair) {
	if rc.entry == "" || os.MkdirAll(filepath.Dir(rc.entry), 0o755) != nil {
		return
	}
	atomicfile.Write(rc.entry, func(w io.Writer) error {
		h := sha256.New()
		bw := bufio.NewWriter(io.MultiWriter(w, h))
		var buf [binary.MaxVarintLen64]byte
		bw.WriteString(referenceMagic)
		bw.Write(buf[:binary.PutUvarint(buf[:], uint64(len(rc.key)))])
		bw.WriteString(rc.key)
		n := 0
		for _, ps := range sets {
			n += len(ps)
		}
		bw.Write(buf[:binary.PutUvarint(buf[:], uint64(n))])
		for _, ps := range sets {
			for _, p := range ps {
				for _, v := range p.Reference {
					bw.Write(binary.LittleEndian.AppendUint64(buf[:0], math.Float64bits(v)))
				}
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		_, err := w.Write(h.Sum(nil))
		return err
	})
}
