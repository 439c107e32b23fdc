package data

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// The Parquet fixtures were written by DuckDB (scripts/gen_parquet_fixture.mjs)
// from the JSONL files beside them.
const parquetDir = "testdata/parquet"

func parquetFormat() Format {
	return Format{Tok: NewByteTokenizer(), Chat: chatML{}, Markers: []string{"<|im_start|>", "<|im_end|>"}}
}

// Each kind of row read from Parquet gives exactly the examples, tokens,
// targets and row numbers of the same rows in JSONL, through every
// loader: Load (several workers or one), LoadJSONL, LoadTasks, LoadPairs.
func TestParquetMatchesJSONL(t *testing.T) {
	f := parquetFormat()
	for _, kind := range []string{"text", "prompt_completion", "input_ids", "messages", "conversations", "alpaca"} {
		t.Run(kind, func(t *testing.T) {
			base := filepath.Join(parquetDir, kind)
			want, err := LoadJSONL(base+".jsonl", f)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []int{1, 3} {
				got, err := Load(context.Background(), base+".parquet", f, LoadOptions{Workers: w})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%d workers: Parquet rows\n%v\nJSONL rows\n%v", w, got, want)
				}
			}
			got, err := LoadJSONL(base+".parquet", f)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("LoadJSONL: %v, %v", err, got)
			}
			if kind == "prompt_completion" || kind == "messages" || kind == "conversations" {
				want, err := LoadTasks(base+".jsonl", f, 0)
				if err != nil {
					t.Fatal(err)
				}
				got, err := LoadTasks(base+".parquet", f, 0)
				if err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("tasks: %v\n%v\nwant\n%v", err, got, want)
				}
				if got, _ := LoadTasks(base+".parquet", f, 1); len(got) != 1 {
					t.Errorf("tasks with limit 1: %d", len(got))
				}
			}
			wantChat := kind == "messages" || kind == "conversations" || kind == "alpaca"
			if Conversational(base+".parquet", false) != wantChat || Conversational(base+".jsonl", false) != wantChat {
				t.Errorf("Conversational: %v for Parquet, %v for JSONL; want %v", Conversational(base+".parquet", false), Conversational(base+".jsonl", false), wantChat)
			}
		})
	}
	for _, kind := range []string{"pairs", "pairs_chat"} {
		t.Run(kind, func(t *testing.T) {
			base := filepath.Join(parquetDir, kind)
			want, err := LoadPairs(base+".jsonl", f, 64)
			if err != nil {
				t.Fatal(err)
			}
			got, err := LoadPairs(base+".parquet", f, 64)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Parquet pairs\n%v\nJSONL pairs\n%v", got, want)
			}
		})
	}
}

// A file of several row groups (DuckDB's, 2048 rows each, zstd) reads
// as its JSONL does, rows numbered across the groups.
func TestParquetSeveralRowGroups(t *testing.T) {
	path := filepath.Join(parquetDir, "dates_train.parquet")
	if n := parquetRowGroups(t, path); n != 2 {
		t.Fatalf("the fixture has %d row groups, want 2", n)
	}
	f := parquetFormat()
	want, err := LoadJSONL("../tasks/dates/train.jsonl", f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(context.Background(), path, f, LoadOptions{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4000 || !reflect.DeepEqual(got, want) {
		t.Fatalf("%d rows; differ from the JSONL's %d", len(got), len(want))
	}
	// a row cap that the longest rows pass: the progress reaches the end
	var last int64
	if _, err := Load(context.Background(), path, f, LoadOptions{Workers: 1, Progress: func(done, total int64) { last = done - total }}); err != nil || last > 0 || last < -256*64 {
		t.Errorf("progress ends %d bytes from the total (%v)", last, err)
	}
}

func parquetRowGroups(t *testing.T, path string) int {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	st, _ := fh.Stat()
	pf, err := parquet.OpenFile(fh, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return len(pf.RowGroups())
}

// writeParquet writes rows with parquet-go, perGroup rows a row group.
func writeParquet[T any](t *testing.T, name string, rows []T, perGroup int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](fh, parquet.MaxRowsPerRowGroup(int64(perGroup)))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// A bad row in a later row group is placed by its group, its row in the
// group and its row in the file; the row numbers of the examples run on
// across groups, whatever the number of workers.
func TestParquetRowErrorsArePlaced(t *testing.T) {
	type pc struct {
		Prompt     string `parquet:"prompt"`
		Completion string `parquet:"completion"`
	}
	rows := make([]pc, 700)
	for i := range rows {
		rows[i] = pc{"q", "a"}
	}
	path := writeParquet(t, "rows.parquet", rows, 300)
	if n := parquetRowGroups(t, path); n != 3 {
		t.Fatalf("%d row groups", n)
	}
	ex, err := Load(context.Background(), path, ByteFormat(), LoadOptions{Workers: 2})
	if err != nil || len(ex) != 700 || ex[0].Line != 1 || ex[699].Line != 700 {
		t.Fatalf("%v: %d rows", err, len(ex))
	}
	rows[612].Completion = ""
	path = writeParquet(t, "bad.parquet", rows, 300)
	for _, w := range []int{1, 2} {
		_, err = Load(context.Background(), path, ByteFormat(), LoadOptions{Workers: w})
		var pe *ParquetError
		if !errors.As(err, &pe) || pe.RowGroup != 2 || pe.Row != 12 || pe.FileRow != 612 ||
			!strings.Contains(err.Error(), `bad.parquet: row group 2, row 12 (row 612 of the file, counting from 0): "completion" is empty`) {
			t.Fatalf("%d workers: %v", w, err)
		}
	}
}

// Bad files are refused naming the file and the column, row group or
// row, as *ParquetError values (exit status 2 in the CLI).
func TestParquetErrors(t *testing.T) {
	dir := t.TempDir()
	notParquet := filepath.Join(dir, "rows.parquet")
	os.WriteFile(notParquet, []byte(`{"text": "a JSONL file named .parquet"}`+"\n"), 0o644)
	good, err := os.ReadFile(filepath.Join(parquetDir, "dates_train.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.parquet")
	os.WriteFile(truncated, good[:len(good)/2], 0o644)
	corrupt := filepath.Join(dir, "corrupt.parquet")
	os.WriteFile(corrupt, damageRowGroup(t, good, 1), 0o644)
	bigFooter := filepath.Join(dir, "footer.parquet")
	os.WriteFile(bigFooter, append([]byte("PAR1"), 0xff, 0xff, 0xff, 0x7f, 'P', 'A', 'R', '1'), 0o644)

	p := func(name string) string { return filepath.Join(parquetDir, name+".parquet") }
	for _, tc := range []struct {
		path  string
		pairs bool
		want  string
	}{
		{notParquet, false, `rows.parquet: not a Parquet file (it does not start and end with "PAR1")`},
		{truncated, false, "truncated.parquet: not a Parquet file"},
		{bigFooter, false, "footer.parquet: damaged Parquet file: its footer claims"},
		{corrupt, false, "corrupt.parquet: row group 1"},
		{p("bad_null_completion"), false, `bad_null_completion.parquet: row group 0, row 1 (row 1 of the file, counting from 0), column "completion": is null; the row needs a string`},
		{p("bad_int_text"), false, `bad_int_text.parquet: column "text": is int32 (INT(32,true)); it must be a string`},
		{p("bad_pairs_missing_rejected"), true, `bad_pairs_missing_rejected.parquet: no column "rejected": a preference file has columns "prompt", "chosen" and "rejected" (this one has "prompt", "chosen")`},
		{p("bad_null_content"), false, `bad_null_content.parquet: row group 0, row 0 (row 0 of the file, counting from 0): messages[1]: "content" must be a string`},
		{p("bad_messages_strings"), false, `bad_messages_strings.parquet: column "messages": is a list of byte_array (STRING); it must be a list of {role, content} structs`},
		{p("bad_empty_messages"), false, `bad_empty_messages.parquet: row group 0, row 0 (row 0 of the file, counting from 0): "messages" is empty: the conversation has no turns`},
		{p("bad_null_messages"), false, `bad_null_messages.parquet: row group 0, row 1 (row 1 of the file, counting from 0), column "messages": is null; the row needs a list`},
		{p("bad_two_kinds"), false, `bad_two_kinds.parquet: columns of two kinds of row, "text" and "messages"`},
		{p("pairs"), false, `pairs.parquet: column "prompt" without "completion"`},
		{p("text"), true, `text.parquet: no column "prompt"`},
	} {
		var err error
		if tc.pairs {
			_, err = LoadPairs(tc.path, parquetFormat(), 64)
		} else {
			_, err = Load(context.Background(), tc.path, parquetFormat(), LoadOptions{})
		}
		var pe *ParquetError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.path, err, tc.want)
		}
	}
	// the same positions through the task reader
	_, err = LoadTasks(p("bad_null_completion"), parquetFormat(), 0)
	if err == nil || !strings.Contains(err.Error(), `row 1 (row 1 of the file, counting from 0), column "completion": is null`) {
		t.Errorf("tasks: %v", err)
	}
}

// damageRowGroup returns a copy of a Parquet file with the pages of row
// group g's columns overwritten.
func damageRowGroup(t *testing.T, file []byte, g int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.parquet")
	os.WriteFile(path, file, 0o644)
	fh, _ := os.Open(path)
	defer fh.Close()
	pf, err := parquet.OpenFile(fh, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte(nil), file...)
	for _, cc := range pf.Metadata().RowGroups[g].Columns {
		md := cc.MetaData
		start := md.DataPageOffset
		if md.DictionaryPageOffset > 0 && md.DictionaryPageOffset < start {
			start = md.DictionaryPageOffset
		}
		for i := start; i < start+md.TotalCompressedSize; i++ {
			out[i] = 0xa5
		}
	}
	return out
}

// Every byte of a small file damaged in turn: the file reads, or fails
// with a *ParquetError; it never panics.
func TestParquetDamagedBytes(t *testing.T) {
	for _, name := range []string{"messages"} {
		good, err := os.ReadFile(filepath.Join(parquetDir, name+".parquet"))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), name+".parquet")
		for i := range good {
			for _, b := range []byte{0xff, good[i] ^ 0x10} {
				bad := append([]byte(nil), good...)
				bad[i] = b
				os.WriteFile(path, bad, 0o644)
				_, err = Load(context.Background(), path, parquetFormat(), LoadOptions{Workers: 1})
				var pe *ParquetError
				if err != nil && !errors.As(err, &pe) {
					t.Fatalf("%s byte %d = %#x: %T %v", name, i, b, err, err)
				}
			}
		}
	}
}

// Lists as parquet-go writes a Go slice (a bare repeated field, no LIST
// group), rather than DuckDB's and Arrow's three levels, read the same.
func TestParquetBareRepeatedLists(t *testing.T) {
	type msg struct {
		Role    string `parquet:"role"`
		Content string `parquet:"content"`
	}
	type conv struct {
		Messages []msg `parquet:"messages"`
	}
	type ids struct {
		InputIDs []int64 `parquet:"input_ids"`
	}
	f := parquetFormat()
	want, err := LoadJSONL(filepath.Join(parquetDir, "messages.jsonl"), f)
	if err != nil {
		t.Fatal(err)
	}
	var rows []conv
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, filepath.Join(parquetDir, "messages.jsonl"))), "\n") {
		var r struct{ Messages []msg }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, conv{r.Messages})
	}
	got, err := LoadJSONL(writeParquet(t, "m.parquet", rows, 2), f)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("messages: %v\n%v\nwant\n%v", err, got, want)
	}
	want, err = LoadJSONL(filepath.Join(parquetDir, "input_ids.jsonl"), f)
	if err != nil {
		t.Fatal(err)
	}
	got, err = LoadJSONL(writeParquet(t, "ids.parquet", []ids{{[]int64{256, 72, 105, 257}}, {[]int64{1, 2}}, {[]int64{0, 255, 100, 258, 3}}}, 2), f)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("input_ids: %v\n%v\nwant\n%v", err, got, want)
	}
	// an empty list is empty, not null, as its JSONL row would be
	_, err = LoadJSONL(writeParquet(t, "empty.parquet", []ids{{[]int64{1, 2}}, {nil}}, 2), f)
	if err == nil || !strings.Contains(err.Error(), `row group 0, row 1 (row 1 of the file, counting from 0): "input_ids" has 0 tokens; it needs at least 2`) {
		t.Fatalf("an empty list: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The data memory estimate counts a Parquet file's data uncompressed.
func TestParquetDataBytes(t *testing.T) {
	path := filepath.Join(parquetDir, "dates_train.parquet")
	st, _ := os.Stat(path)
	jsonl, _ := os.Stat("../tasks/dates/train.jsonl")
	n, ok := ParquetDataBytes(path)
	if !ok || n <= st.Size() || n > 2*jsonl.Size() {
		t.Errorf("%d bytes uncompressed (ok %v); the file has %d, its JSONL %d", n, ok, st.Size(), jsonl.Size())
	}
	if _, ok := ParquetDataBytes(filepath.Join(parquetDir, "text.jsonl")); ok {
		t.Error("a JSONL file read as Parquet")
	}
}
