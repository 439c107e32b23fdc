package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/readlimit"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The file names Hugging Face tools use for a model's weights.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
)

// shardName is the Hugging Face name of shard i (from 1) of n.
func shardName(i, n int) string { return fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n) }

// isShardName reports whether name looks like one written by shardName.
func isShardName(name string) bool {
	rest, ok := strings.CutPrefix(name, "model-")
	if !ok {
		return false
	}
	if rest, ok = strings.CutSuffix(rest, ".safetensors"); !ok {
		return false
	}
	i, n, ok := strings.Cut(rest, "-of-")
	return ok && len(i) == 5 && len(n) == 5 && strings.Trim(i+n, "0123456789") == ""
}

// index is the layout of model.safetensors.index.json.
type index struct {
	Metadata  indexMetadata     `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

type indexMetadata struct {
	TotalSize int64 `json:"total_size"` // bytes of tensor data over all shards
}

// shard is one file of a checkpoint whose header has been read and
// validated; tensor data stays on disk until asked for.
type shard struct {
	path      string
	dataStart int64 // file offset of the data buffer
	hdr       *header
}

// Checkpoint is a set of tensors that may span shards. Opening it reads only
// the headers, so a model larger than memory can be loaded tensor by tensor;
// each Float32 or Raw call reads that tensor from its shard.
type Checkpoint struct {
	dir   string
	names []string // sorted
	where map[string]*shard
}

// OpenCheckpoint opens the model in dir: model.safetensors if present (as
// transformers prefers it), else model.safetensors.index.json and the shards
// it names. Every shard header is validated, and every tensor the index names
// must be in its shard; tensors a shard holds but the index does not name are
// ignored.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	single := filepath.Join(dir, SingleFileName)
	f, err := readlimit.Open(single, readlimit.Model)
	if err == nil {
		s, err := readShard(f, single)
		f.Close()
		if err != nil {
			return nil, err
		}
		c := &Checkpoint{dir: dir, names: s.hdr.names, where: make(map[string]*shard, len(s.hdr.names))}
		for _, n := range s.hdr.names {
			c.where[n] = s
		}
		return c, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	indexPath := filepath.Join(dir, IndexFileName)
	b, err := readlimit.ReadFile(indexPath, readlimit.ShardIndex)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open checkpoint %s: found neither %s nor %s", dir, SingleFileName, IndexFileName)
	}
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	var idx index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %w", indexPath, err)
	}
	if idx.WeightMap == nil {
		return nil, fmt.Errorf("%s: no weight_map", indexPath)
	}
	byShard := map[string][]string{}
	for t, file := range idx.WeightMap {
		byShard[file] = append(byShard[file], t)
	}
	c := &Checkpoint{dir: dir, where: make(map[string]*shard, len(idx.WeightMap))}
	for _, file := range slices.Sorted(maps.Keys(byShard)) {
		tensors := byShard[file]
		slices.Sort(tensors)
		// The index is input too: it must not lead reads outside dir.
		if file == "." || file == ".." || file != filepath.Base(file) || strings.ContainsAny(file, `/\`) {
			return nil, fmt.Errorf("%s: weight_map names invalid shard file %q for tensor %q", indexPath, file, tensors[0])
		}
		path := filepath.Join(dir, file)
		f, err := readlimit.Open(path, readlimit.Model)
		if err != nil {
			return nil, fmt.Errorf("%s: weight_map names %s for tensor %q: %w", indexPath, file, tensors[0], err)
		}
		s, err := readShard(f, path)
		f.Close()
		if err != nil {
			return nil, err
		}
		for _, t := range tensors {
			if _, ok := s.hdr.entries[t]; !ok {
				return nil, fmt.Errorf("%s: weight_map puts tensor %q in %s, which does not contain it", indexPath, t, file)
			}
			c.where[t] = s
			c.names = append(c.names, t)
		}
	}
	slices.Sort(c.names)
	return c, nil
}

// readShard reads and validates the header of the open safetensors file f.
func readShard(f *os.File, path string) (*shard, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var prefix [8]byte
	if st.Size() >= 8 {
		if _, err := io.ReadFull(f, prefix[:]); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	n, err := headerLen(path, prefix[:], st.Size())
	if err != nil {
		return nil, err
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	h, err := parseHeader(path, hdr, st.Size()-8-n)
	if err != nil {
		return nil, err
	}
	return &shard{path: path, dataStart: 8 + n, hdr: h}, nil
}

// Names lists the checkpoint's tensors, sorted.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Info describes the named tensor, and reports whether the checkpoint has it.
func (c *Checkpoint) Info(name string) (Info, bool) {
	s, ok := c.where[name]
	if !ok {
		return Info{}, false
	}
	return s.hdr.info(name)
}

// File is the path of the file holding the named tensor ("" if none does),
// for errors that name where a bad tensor is.
func (c *Checkpoint) File(name string) string {
	if s, ok := c.where[name]; ok {
		return s.path
	}
	return ""
}

// Raw reads the named tensor's stored bytes, whatever its dtype.
func (c *Checkpoint) Raw(name string) ([]byte, Info, error) {
	s, ok := c.where[name]
	if !ok {
		return nil, Info{}, fmt.Errorf("checkpoint %s: no tensor %q", c.dir, name)
	}
	info, _ := s.hdr.info(name)
	b, err := s.read(name)
	if err != nil {
		return nil, Info{}, err
	}
	return b, info, nil
}

// Float32 reads the named tensor and converts it as File.Float32 does.
func (c *Checkpoint) Float32(name string) ([]float32, []int, error) {
	s, ok := c.where[name]
	if !ok {
		return nil, nil, fmt.Errorf("checkpoint %s: no tensor %q", c.dir, name)
	}
	e := s.hdr.entries[name]
	// Refuse a dtype before reading what may be gigabytes of it.
	size, err := floatSize(s.path, name, e.dtype)
	if err != nil {
		return nil, nil, err
	}
	f, err := readlimit.Open(s.path, readlimit.Model)
	if err != nil {
		return nil, nil, fmt.Errorf("read tensor %q: %w", name, err)
	}
	defer f.Close()
	// Read and converted in chunks: the stored bytes of a tensor are never
	// held whole beside its float32 values.
	n := e.end - e.begin
	out := make([]float32, n/int64(size))
	buf := make([]byte, min(n, int64(size)<<20))
	for off := int64(0); off < n; off += int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), n-off)]
		if _, err := f.ReadAt(chunk, s.dataStart+e.begin+off); err != nil {
			if err == io.EOF { // the file shrank since it was opened
				err = io.ErrUnexpectedEOF
			}
			return nil, nil, fmt.Errorf("%s: read tensor %q: %w", s.path, name, err)
		}
		convertFloat32(out[off/int64(size):], e.dtype, chunk)
	}
	return out, slices.Clone(e.shape), nil
}

// read reads the stored bytes of a tensor the shard's header lists.
func (s *shard) read(name string) ([]byte, error) {
	e := s.hdr.entries[name]
	f, err := readlimit.Open(s.path, readlimit.Model)
	if err != nil {
		return nil, fmt.Errorf("read tensor %q: %w", name, err)
	}
	defer f.Close()
	b := make([]byte, e.end-e.begin)
	if _, err := f.ReadAt(b, s.dataStart+e.begin); err != nil {
		if err == io.EOF { // the file shrank since it was opened
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%s: read tensor %q: %w", s.path, name, err)
	}
	return b, nil
}

// WriteCheckpoint writes tensors to dir (created if missing) as
// model.safetensors when their data fits in maxShardBytes or maxShardBytes <=
// 0, and otherwise as shards of at most maxShardBytes of tensor data each (a
// larger tensor gets a shard to itself) plus model.safetensors.index.json.
// Tensors fill shards in name order; metadata goes into every file, as in
// WriteFile.
//
// Files of the other layout and stale shards are removed afterwards, so that
// OpenCheckpoint cannot pick up an old model. Each file is replaced
// atomically, but the checkpoint as a whole is not: to never expose a mix of
// old and new shards, write into a fresh directory and rename it.
func WriteCheckpoint(dir string, tensors []Tensor, metadata map[string]string, maxShardBytes int64) error {
	if err := validate(tensors, metadata); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	order := make([]*Tensor, len(tensors))
	var total int64
	for i := range tensors {
		order[i] = &tensors[i]
		total += tensors[i].nbytes()
	}
	slices.SortFunc(order, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) })

	if maxShardBytes <= 0 || total <= maxShardBytes {
		if err := WriteFile(filepath.Join(dir, SingleFileName), tensors, metadata); err != nil {
			return err
		}
		// model.safetensors wins in OpenCheckpoint, so a crash before this
		// cleanup still opens the new model.
		return removeStale(dir, map[string]bool{SingleFileName: true})
	}

	var shards [][]Tensor
	var cur []Tensor
	var curBytes int64
	for _, t := range order {
		if len(cur) > 0 && curBytes+t.nbytes() > maxShardBytes {
			shards = append(shards, cur)
			cur, curBytes = nil, 0
		}
		cur = append(cur, *t)
		curBytes += t.nbytes()
	}
	shards = append(shards, cur)

	idx := index{Metadata: indexMetadata{TotalSize: total}, WeightMap: make(map[string]string, len(tensors))}
	keep := map[string]bool{IndexFileName: true}
	for i, sh := range shards {
		file := shardName(i+1, len(shards))
		keep[file] = true
		if err := WriteFile(filepath.Join(dir, file), sh, metadata); err != nil {
			return err
		}
		for _, t := range sh {
			idx.WeightMap[t.Name] = file
		}
	}
	// An old model.safetensors would shadow the index, so it goes before the
	// index is written.
	if err := os.Remove(filepath.Join(dir, SingleFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("write checkpoint %s: %w", dir, err)
	}
	b = append(b, '\n')
	indexPath := filepath.Join(dir, IndexFileName)
	if err := atomicfile.WriteFile(indexPath, b); err != nil {
		return fmt.Errorf("write %s: %w", indexPath, err)
	}
	return removeStale(dir, keep)
}

// removeStale deletes the model files in dir that a previous write left and
// the current one did not write: the index, model.safetensors and shards.
func removeStale(dir string, keep map[string]bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if keep[n] || !(n == SingleFileName || n == IndexFileName || isShardName(n)) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("write checkpoint: %w", err)
		}
	}
	return nil
}
