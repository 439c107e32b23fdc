package data

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/mixtune/mixtune/internal/readlimit"
)

// Parquet files hold the same rows as JSONL files, a column for each key
// (Hugging Face Hub datasets download as Parquet). A file's rows are all
// of one kind, the one whose columns it has: "text"; "prompt" and
// "completion"; "input_ids" (a list of integers); "messages" or
// "conversations" (a list of structs of strings, {role, content} or
// {from, value}, as Hugging Face datasets store them); "instruction" and
// "output" with an optional "input"; or, for preference data, "prompt",
// "chosen" and "rejected" (strings, or lists of messages). Other columns
// (an id, a source, scores) are not read.
//
// Each row becomes the JSON object its JSONL line would be and goes
// through the same parsing, tokenizer and template; a null cell is a
// missing value, refused where a string is needed (Alpaca's "input" may be
// null). The file is read a page at a time, row group after row group,
// only the columns used: a multi-gigabyte file is never held whole, and
// each row is held as JSON at most MaxLineBytes long, the JSONL line limit.

// IsParquet reports whether path names a Parquet file, by its extension
// (.parquet, any case): such files are read as Parquet, others as JSONL.
func IsParquet(path string) bool {
	return strings.EqualFold(filepath.Ext(path), ".parquet")
}

// ParquetError is an error in a Parquet file, placed as precisely as it
// is known: the column, the row group, the row. Its message reads
// "File: row group G, row R (row N of the file), column "C": Err", each
// part there only when known.
type ParquetError struct {
	File     string
	Column   string // "" when the error is not one column's
	RowGroup int    // 0-based; -1 when the error is not one row group's
	Row      int64  // 0-based within the row group; -1 when not one row's
	FileRow  int64  // 0-based within the file; -1 when not one row's
	Err      error
}

func (e *ParquetError) Error() string {
	var at []string
	switch {
	case e.RowGroup >= 0 && e.Row >= 0:
		at = append(at, fmt.Sprintf("row group %d, row %d (row %d of the file, counting from 0)", e.RowGroup, e.Row, e.FileRow))
	case e.RowGroup >= 0:
		at = append(at, fmt.Sprintf("row group %d", e.RowGroup))
	case e.FileRow >= 0:
		at = append(at, fmt.Sprintf("row %d (counting from 0)", e.FileRow))
	}
	if e.Column != "" {
		at = append(at, fmt.Sprintf("column %q", e.Column))
	}
	if len(at) == 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.File, strings.Join(at, ", "), e.Err)
}

func (e *ParquetError) Unwrap() error { return e.Err }

// rowError places err at the row of an Example or Pair (Line, 1-based)
// of the file name: file:line for JSONL, the row for Parquet.
func rowError(name string, line int, err error) error {
	if IsParquet(name) {
		return &ParquetError{File: name, RowGroup: -1, Row: -1, FileRow: int64(line) - 1, Err: err}
	}
	return &LineError{File: name, Line: line, Err: err}
}

// maxParquetFooter bounds the file metadata read before any row: a
// footer that claims more is damage, not a dataset (the metadata of a
// file of thousands of row groups is a few megabytes).
const maxParquetFooter = 64 << 20

// parquetUse says which rows a file is read for.
type parquetUse int

const (
	useRows  parquetUse = iota // training and validation rows (rowKinds)
	usePairs                   // preference pairs
)

// parquetFile is an open Parquet file and the columns its rows are read
// from.
type parquetFile struct {
	name string
	os   *os.File
	pf   *parquet.File
	cols []*parquetColumn
}

// parquetColumn is one top-level column read into a row's JSON: a string,
// a list of integers, or a list of structs of strings.
type parquetColumn struct {
	name     string
	optional bool // a null cell is left out of the row (Alpaca's input)
	top      *parquet.Column
	// list columns: rep is the repeated node, elem the element: a leaf
	// (integers) or a group whose leaves are fields (messages)
	list      bool
	rep, elem *parquet.Column
	fields    []*parquet.Column // the leaves read: the column itself, elem, or elem's fields
	ints      bool
}

// openParquet opens the Parquet file at path for use, choosing and
// checking its columns. Errors are *ParquetError values, but a file that
// cannot be opened (a *fs.PathError, a readlimit error).
func openParquet(path string, use parquetUse) (*parquetFile, error) {
	f, err := readlimit.Open(path, readlimit.Data)
	if err != nil {
		return nil, err
	}
	p, err := newParquetFile(path, f, use)
	if err != nil {
		f.Close()
		return nil, err
	}
	return p, nil
}

func newParquetFile(path string, f *os.File, use parquetUse) (*parquetFile, error) {
	bad := func(err error) error { return &ParquetError{File: path, RowGroup: -1, Row: -1, FileRow: -1, Err: err} }
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := checkParquetEnds(f, st.Size()); err != nil {
		return nil, bad(err)
	}
	pf, err := openParquetFile(f, st.Size())
	if err != nil {
		return nil, bad(fmt.Errorf("not a readable Parquet file: %w", err))
	}
	p := &parquetFile{name: path, os: f, pf: pf}
	names, err := p.choose(use)
	if err != nil {
		return nil, bad(err)
	}
	for _, n := range names {
		c, err := newParquetColumn(pf.Root().Column(n.name), n.optional, use == usePairs)
		if err != nil {
			return nil, &ParquetError{File: path, Column: n.name, RowGroup: -1, Row: -1, FileRow: -1, Err: err}
		}
		p.cols = append(p.cols, c)
	}
	return p, nil
}

// openParquetFile reads the file's metadata, turning a panic of the
// library on damaged metadata into an error.
func openParquetFile(r io.ReaderAt, size int64) (pf *parquet.File, err error) {
	defer func() {
		if v := recover(); v != nil {
			pf, err = nil, fmt.Errorf("damaged metadata (%v)", v)
		}
	}()
	return parquet.OpenFile(r, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
}

// checkParquetEnds checks the magic at both ends of a file of size bytes
// and the footer's length, so that a file of another kind is named as
// such and a damaged footer length allocates nothing.
func checkParquetEnds(r io.ReaderAt, size int64) error {
	const magic = "PAR1"
	var head, tail [8]byte
	if size < 12 {
		return fmt.Errorf("not a Parquet file: %d bytes, fewer than the format's 12 of magic and footer length", size)
	}
	if _, err := r.ReadAt(head[:4], 0); err != nil {
		return err
	}
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return err
	}
	if string(head[:4]) != magic || string(tail[4:]) != magic {
		if string(head[:4]) == "PARE" || string(tail[4:]) == "PARE" {
			return errors.New("the Parquet file is encrypted; mixtune reads plain Parquet files")
		}
		return errors.New(`not a Parquet file (it does not start and end with "PAR1"); a .parquet data file must be Parquet, other data files JSONL`)
	}
	if n := int64(binary.LittleEndian.Uint32(tail[:4])); n > size-12 || n > maxParquetFooter {
		return fmt.Errorf("damaged Parquet file: its footer claims %s, more than the file holds or %s", byteSize(int(n)), byteSize(maxParquetFooter))
	}
	return nil
}

type chosenColumn struct {
	name     string
	optional bool
}

// choose names the columns read for use: the one kind of row whose
// columns the file has.
func (p *parquetFile) choose(use parquetUse) ([]chosenColumn, error) {
	var have []string
	for _, c := range p.pf.Root().Columns() {
		have = append(have, c.Name())
	}
	has := func(n string) bool { return slices.Contains(have, n) }
	listed := func() string {
		q := make([]string, len(have))
		for i, n := range have {
			q[i] = strconv.Quote(n)
		}
		return strings.Join(q, ", ")
	}
	if use == usePairs {
		var cols []chosenColumn
		for _, n := range []string{fPrompt, fChosen, fRejected} {
			if !has(n) {
				return nil, fmt.Errorf(`no column %q: a preference file has columns "prompt", "chosen" and "rejected" (this one has %s)`, n, listed())
			}
			cols = append(cols, chosenColumn{name: n})
		}
		return cols, nil
	}
	var complete [][]string
	partial := ""
	for _, k := range rowKinds() {
		req := k[:min(len(k), 2)]
		n := 0
		for _, f := range req {
			if has(f) {
				n++
			}
		}
		switch {
		case n == len(req):
			complete = append(complete, k)
		case n > 0 && partial == "":
			for _, f := range req {
				if !has(f) {
					partial = fmt.Sprintf("column %q without %q", k[0], f)
					if !has(k[0]) {
						partial = fmt.Sprintf("column %q without %q", req[1], k[0])
					}
					break
				}
			}
		}
	}
	switch {
	case len(complete) > 1:
		return nil, fmt.Errorf("columns of two kinds of row, %q and %q: a file's rows are of one kind", complete[0][0], complete[1][0])
	case len(complete) == 0 && partial != "":
		return nil, errors.New(partial)
	case len(complete) == 0:
		return nil, fmt.Errorf(`no column of a data row: a file needs "text", "prompt"+"completion", "input_ids", "messages", "conversations" or "instruction"+"output" (this one has %s)`, listed())
	}
	var cols []chosenColumn
	for i, n := range complete[0] {
		if has(n) {
			cols = append(cols, chosenColumn{name: n, optional: i >= 2}) // Alpaca's input
		}
	}
	return cols, nil
}

// newParquetColumn checks col's type for a string column, a list of
// integers (input_ids) or a list of messages, and finds its leaves.
// A preference column (pair) may be a string or a list of messages.
func newParquetColumn(col *parquet.Column, optional, pair bool) (*parquetColumn, error) {
	c := &parquetColumn{name: col.Name(), optional: optional, top: col}
	want := "a string"
	switch {
	case c.name == fInputIDs:
		want = "a list of integers"
	case c.name == fMessages || c.name == fConversations:
		want = "a list of {role, content} structs"
		if c.name == fConversations {
			want = "a list of {from, value} structs"
		}
	case pair:
		want = "a string, or a list of {role, content} structs"
	}
	fail := func(what string) error { return fmt.Errorf("is %s; it must be %s", what, want) }
	if col.Leaf() && !col.Repeated() {
		if c.name == fInputIDs || c.name == fMessages || c.name == fConversations {
			return nil, fail(typeName(col))
		}
		if !isString(col) {
			return nil, fail(typeName(col))
		}
		c.fields = []*parquet.Column{col}
		return c, nil
	}
	// a list: LIST's three levels (optional group (LIST) { repeated group
	// list { element } }), the legacy two (the repeated node is the
	// element), or a bare repeated field
	c.list = true
	c.rep, c.elem = col, col
	if !col.Repeated() {
		kids := col.Columns()
		if len(kids) != 1 || !kids[0].Repeated() {
			return nil, fail("a struct")
		}
		c.rep, c.elem = kids[0], kids[0]
		if !c.rep.Leaf() && len(c.rep.Columns()) == 1 && c.rep.Name() != "array" && !strings.HasSuffix(c.rep.Name(), "_tuple") {
			c.elem = c.rep.Columns()[0]
		}
	}
	if c.name == fInputIDs {
		if !c.elem.Leaf() || !isInt(c.elem) {
			return nil, fail("a list of " + typeName(c.elem))
		}
		c.ints, c.fields = true, []*parquet.Column{c.elem}
		return c, nil
	}
	if c.elem.Leaf() || (c.name != fMessages && c.name != fConversations && !pair) {
		return nil, fail("a list of " + typeName(c.elem))
	}
	for _, fc := range c.elem.Columns() {
		if !fc.Leaf() || fc.Repeated() || !isString(fc) {
			return nil, fmt.Errorf("field %q of its structs is %s; it must be a list of structs of strings", fc.Name(), typeName(fc))
		}
		c.fields = append(c.fields, fc)
	}
	if len(c.fields) == 0 {
		return nil, fail("a list of empty structs")
	}
	return c, nil
}

// isString reports whether a leaf holds text: a byte array annotated as
// a string (or an enum, or JSON), or not annotated, as older writers
// leave text; every value is checked to be UTF-8 as it is read.
func isString(c *parquet.Column) bool {
	if c.Type().Kind() != parquet.ByteArray {
		return false
	}
	switch logical(c.Type()).(type) {
	case nil, *format.StringType, *format.EnumType, *format.JsonType:
		return true
	}
	return false
}

// isInt reports whether a leaf holds integers.
func isInt(c *parquet.Column) bool {
	switch c.Type().Kind() {
	case parquet.Int32, parquet.Int64:
		switch logical(c.Type()).(type) {
		case nil, *format.IntType:
			return true
		}
	}
	return false
}

// logical is t's logical type, nil when it has none.
func logical(t parquet.Type) format.LogicalTypeValue {
	if lt := t.LogicalType(); lt != nil {
		return lt.Value
	}
	return nil
}

// typeName describes a column's type in an error.
func typeName(c *parquet.Column) string {
	switch {
	case c.Repeated():
		return "a repeated field"
	case !c.Leaf():
		return "a struct"
	}
	t := c.Type()
	if lt := logical(t); lt != nil {
		return fmt.Sprintf("%s (%s)", strings.ToLower(t.Kind().String()), lt)
	}
	return strings.ToLower(t.Kind().String())
}

// numRows is the number of rows the file's metadata gives.
func (p *parquetFile) numRows() int64 { return p.pf.NumRows() }

func (p *parquetFile) Close() error { return p.os.Close() }

// cell is one value of a leaf, copied out of its page.
type cell struct {
	rep, def int
	str      string
	num      int64
	null     bool
}

// leafCursor reads one leaf column chunk's values a page at a time, a
// row at a time.
type leafCursor struct {
	col   *parquet.Column
	pages parquet.Pages
	vr    parquet.ValueReader
	buf   []parquet.Value
	i, n  int
	eof   bool
}

func (c *leafCursor) peek() (parquet.Value, bool, error) {
	for c.i == c.n {
		if c.eof {
			return parquet.Value{}, false, nil
		}
		if c.vr == nil {
			pg, err := c.pages.ReadPage()
			if err == io.EOF {
				c.eof = true
				continue
			}
			if err != nil {
				return parquet.Value{}, false, fmt.Errorf("damaged page: %w", err)
			}
			c.vr = pg.Values()
		}
		n, err := c.vr.ReadValues(c.buf)
		c.i, c.n = 0, n
		if err == io.EOF {
			c.vr = nil
		} else if err != nil {
			return parquet.Value{}, false, fmt.Errorf("damaged page: %w", err)
		}
	}
	return c.buf[c.i], true, nil
}

// row appends the next row's values to dst, copied.
func (c *leafCursor) row(dst []cell) ([]cell, error) {
	for first := true; ; first = false {
		v, ok, err := c.peek()
		if err != nil {
			return nil, err
		}
		if !ok {
			if first {
				return nil, errors.New("holds fewer rows than its row group")
			}
			return dst, nil
		}
		if first != (v.RepetitionLevel() == 0) {
			if first {
				return nil, errors.New("damaged: a row starts with a repeated value")
			}
			return dst, nil
		}
		x := cell{rep: v.RepetitionLevel(), def: v.DefinitionLevel(), null: v.IsNull()}
		if !x.null {
			switch v.Kind() {
			case parquet.ByteArray, parquet.FixedLenByteArray:
				x.str = string(v.ByteArray())
			case parquet.Int32:
				x.num = int64(v.Int32())
			case parquet.Int64:
				x.num = v.Int64()
			}
		}
		c.i++
		dst = append(dst, x)
	}
}

// scan reads the file's rows, row group by row group, as the JSON
// objects their JSONL lines would be, and hands each to emit with its row
// group, its row in the group and its row in the file (0-based). It stops
// at emit's first error, returning it, and with ctx.Err() when ctx is
// cancelled.
func (p *parquetFile) scan(ctx context.Context, emit func(g int, row, fileRow int64, obj []byte) error) error {
	var fileRow int64
	for g, rg := range p.pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := p.scanGroup(ctx, g, rg, fileRow, emit)
		if err != nil {
			return err
		}
		fileRow += n
	}
	return nil
}

// scanGroup reads row group g, whose first row is the file's fileRow.
// A panic of the library on damaged pages is an error of the row group.
func (p *parquetFile) scanGroup(ctx context.Context, g int, rg parquet.RowGroup, fileRow int64, emit func(g int, row, fileRow int64, obj []byte) error) (rows int64, err error) {
	groupErr := func(col string, row int64, e error) error {
		pe := &ParquetError{File: p.name, Column: col, RowGroup: g, Row: row, FileRow: -1, Err: e}
		if row >= 0 {
			pe.FileRow = fileRow + row
		}
		return pe
	}
	defer func() {
		if v := recover(); v != nil {
			err = groupErr("", -1, fmt.Errorf("damaged data (%v)", v))
		}
	}()
	chunks := rg.ColumnChunks()
	cursors := make([][]*leafCursor, len(p.cols))
	for i, c := range p.cols {
		for _, leaf := range c.fields {
			idx := leaf.Index()
			if idx < 0 || idx >= len(chunks) {
				return 0, groupErr(c.name, -1, errors.New("damaged: the row group lacks the column"))
			}
			pages := chunks[idx].Pages()
			defer pages.Close()
			cursors[i] = append(cursors[i], &leafCursor{col: leaf, pages: pages, buf: make([]parquet.Value, 256)})
		}
	}
	var obj bytes.Buffer
	vals := make([][]cell, 0, 4)
	total := rg.NumRows()
	for r := int64(0); r < total; r++ {
		if r%256 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		obj.Reset()
		obj.WriteByte('{')
		wrote := false
		for i, c := range p.cols {
			vals = vals[:0]
			for _, cur := range cursors[i] {
				v, err := cur.row(nil)
				if err != nil {
					return 0, groupErr(c.name, r, fmt.Errorf("leaf %s: %w", strings.Join(cur.col.Path(), "."), err))
				}
				vals = append(vals, v)
			}
			start := obj.Len()
			if wrote {
				obj.WriteByte(',')
			}
			writeJSONString(&obj, c.name)
			obj.WriteByte(':')
			skip, err := c.appendJSON(&obj, vals)
			if err != nil {
				return 0, groupErr(c.name, r, err)
			}
			if skip {
				obj.Truncate(start)
				continue
			}
			wrote = true
			if obj.Len() > MaxLineBytes {
				return 0, groupErr(c.name, r, fmt.Errorf("the row is longer than %s as JSON, the limit of a row", byteSize(MaxLineBytes)))
			}
		}
		obj.WriteByte('}')
		if err := emit(g, r, fileRow+r, bytes.Clone(obj.Bytes())); err != nil {
			return 0, err
		}
	}
	for i, c := range p.cols {
		for _, cur := range cursors[i] {
			if _, more, err := cur.peek(); err != nil || more {
				if err == nil {
					err = fmt.Errorf("holds more values than its row group's %d rows", total)
				}
				return 0, groupErr(c.name, -1, fmt.Errorf("leaf %s: %w", strings.Join(cur.col.Path(), "."), err))
			}
		}
	}
	return total, nil
}

// appendJSON writes the column's cell of one row (vals: each leaf's
// values of the row) to obj as JSON. skip reports an optional column's
// null, to be left out.
func (c *parquetColumn) appendJSON(obj *bytes.Buffer, vals [][]cell) (skip bool, err error) {
	first := vals[0]
	if !c.list {
		v := first[0]
		if v.def < c.fields[0].MaxDefinitionLevel() {
			if c.optional {
				return true, nil
			}
			return false, errors.New("is null; the row needs a string")
		}
		return false, appendString(obj, v.str, "")
	}
	// a null list (some node above the repeated one undefined), an empty
	// one, or elements
	if d := first[0].def; d < c.rep.MaxDefinitionLevel() {
		// a bare repeated field (top is rep) has no null, only empty
		if c.top != c.rep && d < c.top.MaxDefinitionLevel() {
			return false, errors.New("is null; the row needs a list")
		}
		obj.WriteString("[]")
		return false, nil
	}
	for _, v := range vals[1:] {
		if len(v) != len(first) {
			return false, errors.New("damaged: its fields hold lists of different lengths")
		}
	}
	obj.WriteByte('[')
	for j := range first {
		if j > 0 {
			obj.WriteByte(',')
		}
		if first[j].def < c.elem.MaxDefinitionLevel() {
			obj.WriteString("null") // a null element: the row's parser says what is wrong
			continue
		}
		if c.ints {
			if first[j].def < c.fields[0].MaxDefinitionLevel() {
				obj.WriteString("null")
			} else {
				obj.WriteString(strconv.FormatInt(first[j].num, 10))
			}
			continue
		}
		obj.WriteByte('{')
		wrote := false
		for k, fc := range c.fields {
			v := vals[k][j]
			if v.def < fc.MaxDefinitionLevel() {
				continue // a null field is a missing key
			}
			if wrote {
				obj.WriteByte(',')
			}
			wrote = true
			writeJSONString(obj, fc.Name())
			obj.WriteByte(':')
			if err := appendString(obj, v.str, fmt.Sprintf("[%d].%s", j, fc.Name())); err != nil {
				return false, err
			}
		}
		obj.WriteByte('}')
	}
	obj.WriteByte(']')
	return false, nil
}

// appendString writes s as a JSON string, refusing text that is not
// UTF-8 (JSON would turn it into replacement characters). at places the
// value inside the column ("" for the column itself).
func appendString(obj *bytes.Buffer, s, at string) error {
	if !utf8.ValidString(s) {
		i := 0
		for i < len(s) {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			i += size
		}
		return fmt.Errorf("%s: invalid UTF-8 at byte %d of the value (text must be UTF-8)", strings.TrimPrefix(at, "."), i+1)
	}
	writeJSONString(obj, s)
	return nil
}

func writeJSONString(obj *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // valid UTF-8: cannot fail
	obj.Write(b)
}

// parquetBlocks reads the file's rows into blocks of linesPerBlock JSON
// objects, handing each to emit; a block's rows are numbered by their
// 1-based row in the file, and its errors placed by the rows' group.
func (p *parquetFile) parquetBlocks(ctx context.Context, size int64, emit func(*block)) error {
	var cur *block
	per := float64(size) / float64(max(p.numRows(), 1))
	flush := func() {
		if cur != nil {
			cur.size = int64(per * float64(len(cur.lines)))
			emit(cur)
			cur = nil
		}
	}
	defer flush()
	return p.scan(ctx, func(g int, row, fileRow int64, obj []byte) error {
		if cur == nil {
			cur = &block{first: int(fileRow) + 1, at: p.placeRows(g, row, fileRow)}
		} else if cur.group != g {
			flush()
			cur = &block{first: int(fileRow) + 1, at: p.placeRows(g, row, fileRow)}
		}
		cur.group = g
		cur.lines = append(cur.lines, obj)
		if len(cur.lines) == linesPerBlock {
			flush()
		}
		return nil
	})
}

// placeRows places an error at a 1-based file row n of a block whose
// first row is row of row group g, and the file's fileRow.
func (p *parquetFile) placeRows(g int, row, fileRow int64) func(n int, err error) error {
	return func(n int, err error) error {
		off := int64(n) - 1 - fileRow
		return &ParquetError{File: p.name, RowGroup: g, Row: row + off, FileRow: fileRow + off, Err: err}
	}
}

// loadParquet is Load for a Parquet file.
func loadParquet(ctx context.Context, path string, f Format, opt LoadOptions) ([]Example, error) {
	p, err := openParquet(path, useRows)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if st, err := p.os.Stat(); err == nil {
		opt.total = st.Size()
	}
	return parseBlocks(ctx, path, f, opt, func(emit func(*block)) error {
		return p.parquetBlocks(ctx, opt.total, emit)
	})
}

// parquetObjects reads every row of the Parquet file at path for use,
// calling fn with each row's JSON object and a function that places an
// error at the row.
func parquetObjects(path string, use parquetUse, fn func(fileRow int64, obj []byte, place func(error) error) error) error {
	p, err := openParquet(path, use)
	if err != nil {
		return err
	}
	defer p.Close()
	return p.scan(context.Background(), func(g int, row, fileRow int64, obj []byte) error {
		return fn(fileRow, obj, func(err error) error {
			return &ParquetError{File: path, RowGroup: g, Row: row, FileRow: fileRow, Err: err}
		})
	})
}

// ParquetDataBytes is the uncompressed size of the data in the Parquet
// file at path, from its metadata: what its rows take as text, as a JSONL
// file's size is. ok is false when the file cannot be read as Parquet.
func ParquetDataBytes(path string) (n int64, ok bool) {
	f, err := readlimit.Open(path, readlimit.Data)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || checkParquetEnds(f, st.Size()) != nil {
		return 0, false
	}
	pf, err := openParquetFile(f, st.Size())
	if err != nil {
		return 0, false
	}
	for _, rg := range pf.Metadata().RowGroups {
		n += rg.TotalByteSize
	}
	return n, true
}

// parquetConversational is Conversational for a Parquet file: its rows'
// kind, from its columns.
func parquetConversational(path string, alpaca bool) bool {
	p, err := openParquet(path, useRows)
	if err != nil {
		return false
	}
	defer p.Close()
	switch p.cols[0].name {
	case fMessages, fConversations:
		return true
	case fInstruction:
		return !alpaca
	}
	return false
}
