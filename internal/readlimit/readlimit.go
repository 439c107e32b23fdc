// Package readlimit opens and reads the files mixtune takes as input with
// a size limit suited to each kind of file, so that a wrong path (a
// symlink to /dev/zero, a FIFO, a multi-gigabyte file where a small JSON
// belongs) ends in an error that names the file, its kind and the limit,
// never in the runtime running out of memory or a read that never ends.
//
// Only regular files are accepted: a device or a FIFO where a file belongs
// is refused before a byte is read, and opening never blocks on a FIFO
// that has no writer.
package readlimit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Kind is a kind of input file, with its size limit.
type Kind int

// The kinds of input file. Limits are far above the largest real file of
// each kind (Gemma 3's tokenizer.json, 33 MB, is the largest tokenizer
// file of a popular model; Hugging Face configs are kilobytes).
const (
	TokenizerJSON   Kind = iota // tokenizer.json (decompressed, for tokenizer.json.gz)
	TokenizerConfig             // tokenizer_config.json, special_tokens_map.json
	Vocabulary                  // tokenizer.model, vocab.json, merges.txt
	ModelConfig                 // config.json, generation_config.json
	ChatTemplate                // chat_template.jinja and other template files
	Recipe                      // a training recipe (YAML)
	AdapterConfig               // a PEFT adapter_config.json
	ShardIndex                  // model.safetensors.index.json
	RunRecord                   // a run's own JSON files: summary.json, checkpoint manifests and state
	Metrics                     // metrics.jsonl and its copy in a checkpoint
	Weights                     // a safetensors file read whole (adapter, trainable weights, optimizer state)
	Model                       // a model file read in parts (safetensors shards, GGUF): a regular file, no size limit
	TokenCache                  // an entry of the token cache
	Data                        // a JSONL data file, streamed line by line (the line limit is the data package's), or a Parquet file read a page at a time
	Text                        // a text file to tokenize (`mixtune tokenize --file`)
)

// Limit is the largest size, in bytes, of a file of kind k.
func (k Kind) Limit() int64 {
	switch k {
	case TokenizerJSON, Vocabulary:
		return 256 << 20
	case TokenizerConfig, ShardIndex, RunRecord, Text:
		return 64 << 20
	case ModelConfig, ChatTemplate, Recipe, AdapterConfig:
		return 16 << 20
	case Metrics:
		return 1 << 30
	case TokenCache:
		return 64 << 30
	}
	// Weights, models and streamed data: their size is checked against
	// memory or read in bounded pieces elsewhere.
	return 1 << 62
}

// String names the kind in error messages.
func (k Kind) String() string {
	switch k {
	case TokenizerJSON:
		return "tokenizer.json"
	case TokenizerConfig:
		return "tokenizer config"
	case Vocabulary:
		return "tokenizer vocabulary file"
	case ModelConfig:
		return "model config"
	case ChatTemplate:
		return "chat template"
	case Recipe:
		return "recipe"
	case AdapterConfig:
		return "adapter config"
	case ShardIndex:
		return "safetensors index"
	case RunRecord:
		return "run record"
	case Metrics:
		return "metrics log"
	case Weights:
		return "safetensors file"
	case Model:
		return "model file"
	case TokenCache:
		return "token cache entry"
	case Data:
		return "data file"
	case Text:
		return "text file"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// TooLargeError is a file over its kind's limit.
type TooLargeError struct {
	Path string
	Kind Kind
	Size int64 // the size, or -1 when the file grew past the limit while being read
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("%s: the %s is larger than its limit of %s", e.Path, e.Kind, Bytes(e.Kind.Limit()))
	}
	return fmt.Sprintf("%s: the %s is %s, more than its limit of %s", e.Path, e.Kind, Bytes(e.Size), Bytes(e.Kind.Limit()))
}

// NotRegularError is a path that names a device, a FIFO, a socket or a
// directory where a file belongs.
type NotRegularError struct {
	Path string
	Kind Kind
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	what := "not a regular file"
	switch {
	case e.Mode.IsDir():
		what = "a directory"
	case e.Mode&fs.ModeNamedPipe != 0:
		what = "a FIFO"
	case e.Mode&fs.ModeSocket != 0:
		what = "a socket"
	case e.Mode&fs.ModeDevice != 0:
		what = "a device"
	}
	return fmt.Sprintf("%s: is %s, not a regular file (a %s must be a file)", e.Path, what, e.Kind)
}

// Open opens the regular file at path (following symlinks) for reading,
// refusing anything else and a file over k's limit. The caller reads it
// as it likes; ReadAll bounds a read.
func Open(path string, k Kind) (*os.File, error) {
	f, err := openNoBlock(path)
	if err != nil {
		return nil, err // *fs.PathError names the path and the operation
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Kind: k, Mode: st.Mode()}
	}
	if st.Size() > k.Limit() {
		f.Close()
		return nil, &TooLargeError{Path: path, Kind: k, Size: st.Size()}
	}
	return f, nil
}

// ReadFile is os.ReadFile for a file of kind k: only a regular file, and
// only up to k's limit.
func ReadFile(path string, k Kind) ([]byte, error) {
	f, err := Open(path, k)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, path, k)
}

// ReadAll reads r to its end, failing once more than k's limit has come:
// for a file that grows while it is read, and for decompressed data. path
// names r in the error.
func ReadAll(r io.Reader, path string, k Kind) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, k.Limit()+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > k.Limit() {
		return nil, &TooLargeError{Path: path, Kind: k, Size: -1}
	}
	return b, nil
}

// IsLimit reports whether err is a refusal of this package: a file too
// large or not a regular file.
func IsLimit(err error) bool {
	var tl *TooLargeError
	var nr *NotRegularError
	return errors.As(err, &tl) || errors.As(err, &nr)
}

// Bytes formats a size for an error message: in KiB, MiB or GiB when it
// is a whole number of them, else in bytes.
func Bytes(n int64) string {
	for _, u := range []struct {
		shift int
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift {
			if n%(1<<u.shift) == 0 {
				return fmt.Sprintf("%d %s", n>>u.shift, u.name)
			}
			return fmt.Sprintf("%.1f %s (%d bytes)", float64(n)/float64(int64(1)<<u.shift), u.name, n)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
