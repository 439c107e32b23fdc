package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is Hugging Face's BPE model.
type bpe struct {
	vocab  map[string]int32
	vocabR []string // by id; "" where no token has the id
	hasID  []bool
	merges *mergeTable

	unk          int32 // -1 when there is no unk_token
	unkToken     string
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	byteTokens   [256]int32 // ids of <0x00>..<0xFF>, -1 where missing

	// raw is set when the model can run on the raw bytes of a ByteLevel
	// piece instead of its mapped characters: every byte's character is a
	// token, there is no unk, prefix, suffix or byte fallback. rawVocab
	// holds the tokens by their bytes and rawByte the ids of single bytes.
	raw      bool
	rawVocab map[string]int32
	rawByte  [256]int32

	// chunkSep, when set, is a character before which no merge can reach
	// (see setupChunks): long words are tokenized as chunks that start
	// there, which the word cache then serves.
	chunkSep string

	cache *wordCache
	pool  sync.Pool
}

// chunkChar is SentencePiece's word boundary.
const chunkChar = "\u2581"

// setupChunks sets chunkSep when SentencePiece's "▁" starts every token it
// is in (runs of "▁" aside): no merge then joins a character to a "▁" that
// follows it, so the tokens of a text are those of its pieces cut before
// each such "▁". This is what makes Llama 2 style tokenizers, which have no
// pre-tokenizer and so see whole lines as one word, fast. The BPE options
// that look at a word as a whole (prefix, suffix, ignore_merges) rule it
// out.
func (m *bpe) setupChunks() {
	if m.prefix != "" || m.suffix != "" || m.ignoreMerges {
		return
	}
	if _, ok := m.vocab[chunkChar]; !ok {
		return
	}
	for tok := range m.vocab {
		for i := strings.Index(tok, chunkChar); i >= 0; {
			if i > 0 && !strings.HasSuffix(tok[:i], chunkChar) {
				return
			}
			k := strings.Index(tok[i+len(chunkChar):], chunkChar)
			if k < 0 {
				break
			}
			i += len(chunkChar) + k
		}
	}
	m.chunkSep = chunkChar
}

// nextChunk returns the end of the chunk of w that starts at start: the
// next "▁" that follows another character.
func nextChunk(w string, start int) int {
	for i := start + 1; i < len(w); {
		k := strings.Index(w[i:], chunkChar)
		if k < 0 {
			return len(w)
		}
		p := i + k
		if !strings.HasSuffix(w[:p], chunkChar) {
			return p
		}
		i = p + len(chunkChar)
	}
	return len(w)
}

type mergeInfo struct {
	rank  int32
	newID int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// mergeTable maps a pair of ids to its merge: an open-addressing hash
// table, because the lookups of mergeAll dominate encoding and Go's map
// costs twice as much for them.
type mergeTable struct {
	keys  []uint64 // emptyKey where free
	vals  []mergeInfo
	shift uint
	n     int
}

// emptyKey cannot be a pair: ids are below 2^24.
const emptyKey = ^uint64(0)

func newMergeTable(n int) *mergeTable {
	size, shift := 16, uint(60)
	for size < 2*n {
		size *= 2
		shift--
	}
	t := &mergeTable{keys: make([]uint64, size), vals: make([]mergeInfo, size), shift: shift}
	for i := range t.keys {
		t.keys[i] = emptyKey
	}
	return t
}

func (t *mergeTable) slot(k uint64) int { return int((k * 0x9E3779B97F4A7C15) >> t.shift) }

// set adds or replaces the merge of a pair.
func (t *mergeTable) set(k uint64, v mergeInfo) {
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case emptyKey:
			t.keys[i], t.vals[i] = k, v
			t.n++
			return
		case k:
			t.vals[i] = v
			return
		}
	}
}

func (t *mergeTable) get(k uint64) (mergeInfo, bool) {
	mask := len(t.keys) - 1
	for i := t.slot(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.vals[i], true
		case emptyKey:
			return mergeInfo{}, false
		}
	}
}

// tokenAppender receives the tokens of a word: id and [start, end) in the
// word's bytes.
type wordTokens struct {
	ids  []int32
	lens []int32
}

// tokenize appends the tokens of one pre-tokenized piece to dst. rawBytes
// selects the byte-level mode (see bpe.raw).
func (m *bpe) tokenize(w string, rawBytes bool, emit func(id int32, start, end int)) {
	if w == "" {
		return
	}
	if m.chunkSep != "" && !rawBytes && len(w) > 16 {
		for start := 0; start < len(w); {
			end := nextChunk(w, start)
			base := start
			m.tokenizeWord(w[start:end], false, func(id int32, a, b int) { emit(id, base+a, base+b) })
			start = end
		}
		return
	}
	m.tokenizeWord(w, rawBytes, emit)
}

// longWord is the length in bytes above which a word's symbols are not
// pooled.
const longWord = 64 << 10

// tokenizeWord is BPE::tokenize on one word.
func (m *bpe) tokenizeWord(w string, rawBytes bool, emit func(id int32, start, end int)) {
	if m.ignoreMerges {
		v := m.vocab
		if rawBytes {
			v = m.rawVocab
		}
		if id, ok := v[w]; ok {
			emit(id, 0, len(w))
			return
		}
	}
	cacheable := len(w) < 256
	if cacheable {
		if wt, ok := m.cache.get(w, rawBytes); ok {
			pos := 0
			for i, id := range wt.ids {
				emit(id, pos, pos+int(wt.lens[i]))
				pos += int(wt.lens[i])
			}
			return
		}
	}
	// A long word (a whole line or row, for a tokenizer without a
	// pre-tokenizer) gets a symbol array of its bound, one per byte, that
	// goes back to the garbage collector, not to the pool: growing it by
	// appending allocated several times that, and the pool would keep the
	// largest alive.
	long := len(w) > longWord
	var sc *symbols
	if long {
		sc = &symbols{sym: make([]symbol, 0, len(w))}
	} else if sc, _ = m.pool.Get().(*symbols); sc == nil {
		sc = &symbols{}
	}
	sc.reset()
	if rawBytes {
		for i := 0; i < len(w); i++ {
			sc.add(m.rawByte[w[i]], 1)
		}
	} else {
		m.initWord(sc, w)
	}
	sc.mergeAll(m.merges)
	var wt wordTokens
	if cacheable {
		wt.ids = make([]int32, 0, len(sc.sym))
		wt.lens = make([]int32, 0, len(sc.sym))
	}
	pos := 0
	for i := 0; i >= 0 && i < len(sc.sym); i = int(sc.sym[i].next) {
		x := sc.sym[i]
		if x.ln == 0 {
			continue
		}
		emit(x.c, pos, pos+int(x.ln))
		pos += int(x.ln)
		if cacheable {
			wt.ids = append(wt.ids, x.c)
			wt.lens = append(wt.lens, x.ln)
		}
	}
	if !long {
		m.pool.Put(sc)
	}
	if cacheable {
		m.cache.put(w, rawBytes, wt)
	}
}

// initWord is the first part of BPE::merge_word: one symbol per
// character, with the prefix, suffix, byte fallback and unk rules.
func (m *bpe) initWord(sc *symbols, w string) {
	unkID, unkLen := int32(-1), 0
	var sb strings.Builder
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+size]
		if (i > 0 && m.prefix != "") || (i+size == len(w) && m.suffix != "") {
			sb.Reset()
			if i > 0 {
				sb.WriteString(m.prefix)
			}
			sb.WriteString(s)
			if i+size == len(w) {
				sb.WriteString(m.suffix)
			}
			s = sb.String()
		}
		i += size
		if id, ok := m.vocab[s]; ok {
			if unkID >= 0 {
				sc.add(unkID, unkLen)
				unkID = -1
			}
			sc.add(id, size)
			continue
		}
		if m.byteFallback {
			ok := true
			for k := 0; k < len(s); k++ {
				if m.byteTokens[s[k]] < 0 {
					ok = false
					break
				}
			}
			if ok {
				// The crate adds the byte tokens without flushing a
				// pending unk first, so an unk can follow them.
				for k := 0; k < len(s); k++ {
					sc.add(m.byteTokens[s[k]], 1)
				}
				continue
			}
		}
		if m.unk >= 0 {
			switch {
			case unkID >= 0 && m.fuseUnk:
				unkLen += size
			case unkID >= 0:
				sc.add(unkID, unkLen)
				unkID, unkLen = m.unk, size
			default:
				unkID, unkLen = m.unk, size
			}
		}
	}
	if unkID >= 0 {
		sc.add(unkID, unkLen)
	}
}

// symbols is the crate's Word: a linked list of symbols over an array.
type symbols struct {
	sym  []symbol
	heap []uint64 // merge candidates: rank<<32 | position
}

type symbol struct {
	c, prev, next, ln int32
}

func (sc *symbols) reset() {
	sc.sym = sc.sym[:0]
	sc.heap = sc.heap[:0]
}

func (sc *symbols) add(id int32, n int) {
	k := int32(len(sc.sym))
	if k > 0 {
		sc.sym[k-1].next = k
	}
	sc.sym = append(sc.sym, symbol{c: id, prev: k - 1, next: -1, ln: int32(n)})
}

// The queue orders candidates by rank, then position, as the crate's
// does; packing both in one integer makes that one comparison. It is a
// 4-ary heap, like the crate's (the order of pops does not depend on it).
const heapArity = 4

func (sc *symbols) push(rank, pos int32) {
	x := uint64(uint32(rank))<<32 | uint64(uint32(pos))
	h := append(sc.heap, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / heapArity
		if x >= h[p] {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = x
	sc.heap = h
}

func (sc *symbols) pop() (rank, pos int32) {
	h := sc.heap
	top := h[0]
	last := len(h) - 1
	x := h[last]
	h = h[:last]
	if n := len(h); n > 0 {
		i := 0
		for {
			first := heapArity*i + 1
			if first >= n {
				break
			}
			m := first
			end := min(first+heapArity, n)
			for c := first + 1; c < end; c++ {
				if h[c] < h[m] {
					m = c
				}
			}
			if h[m] >= x {
				break
			}
			h[i] = h[m]
			i = m
		}
		h[i] = x
	}
	sc.heap = h
	return int32(top >> 32), int32(uint32(top))
}

// mergeAll is Word::merge_all without dropout: the pair with the lowest
// rank is merged first, the leftmost among equal ranks.
//
// The crate skips a queued candidate when the pair now at its position
// merges into another token than the one queued. A merged token's text is
// the text of the two symbols, and the text a position's pair covers only
// grows, so that happens exactly when the pair has changed, which is when
// its rank differs: the check below compares ranks.
func (sc *symbols) mergeAll(merges *mergeTable) {
	sym := sc.sym
	for i := 0; i+1 < len(sym); i++ {
		if mi, ok := merges.get(pairKey(sym[i].c, sym[i+1].c)); ok {
			sc.push(mi.rank, int32(i))
		}
	}
	for len(sc.heap) > 0 {
		rank, p := sc.pop()
		cur := &sym[p]
		if cur.ln == 0 || cur.next == -1 {
			continue
		}
		nx := cur.next
		right := sym[nx]
		mi, ok := merges.get(pairKey(cur.c, right.c))
		if !ok || mi.rank != rank {
			continue
		}
		cur.c = mi.newID
		cur.ln += right.ln
		cur.next = right.next
		sym[nx].ln = 0
		if nn := right.next; nn > -1 && int(nn) < len(sym) {
			sym[nn].prev = p
		}
		if pv := cur.prev; pv >= 0 {
			if mi, ok := merges.get(pairKey(sym[pv].c, cur.c)); ok {
				sc.push(mi.rank, pv)
			}
		}
		if nn := cur.next; nn >= 0 && int(nn) < len(sym) {
			if mi, ok := merges.get(pairKey(cur.c, sym[nn].c)); ok {
				sc.push(mi.rank, p)
			}
		}
	}
}

// wordCache remembers the tokens of words, as the crate's BPE cache does.
// It is shared by the goroutines of EncodeBatch, hence the sharding.
type wordCache struct {
	seed   maphash.Seed
	shards [64]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]wordTokens
}

// cacheShardCap bounds each shard; a full shard is emptied, which costs
// less than tracking use and only matters for memory.
const cacheShardCap = 4096

func newWordCache() *wordCache {
	c := &wordCache{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].m = make(map[string]wordTokens)
	}
	return c
}

func cacheKey(w string, raw bool) string {
	if raw {
		return w
	}
	// Raw and character words never share a model, but keep them apart
	// anyway so that the cache cannot mix them up.
	return "\x00" + w
}

func (c *wordCache) shard(k string) *cacheShard {
	return &c.shards[maphash.String(c.seed, k)%uint64(len(c.shards))]
}

func (c *wordCache) get(w string, raw bool) (wordTokens, bool) {
	if raw {
		sh := c.shard(w)
		sh.mu.RLock()
		wt, ok := sh.m[w]
		sh.mu.RUnlock()
		return wt, ok
	}
	k := cacheKey(w, raw)
	sh := c.shard(k)
	sh.mu.RLock()
	wt, ok := sh.m[k]
	sh.mu.RUnlock()
	return wt, ok
}

func (c *wordCache) put(w string, raw bool, wt wordTokens) {
	k := cacheKey(w, raw)
	sh := c.shard(k)
	sh.mu.Lock()
	if len(sh.m) >= cacheShardCap {
		sh.m = make(map[string]wordTokens)
	}
	sh.m[strings.Clone(k)] = wt
	sh.mu.Unlock()
}
