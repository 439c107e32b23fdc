package data

import (
	"bufio"
	"bytes"
	"os"
)

// Conversational reports whether any row of the JSONL file at path goes
// through the chat template: a "messages" or "conversations" row, or an
// Alpaca row unless alpaca renders those with the Stanford prompt. Only
// lines that name one of those keys are decoded, so a file of other rows
// costs one read. Unreadable files and rows count as none: loading them
// reports what is wrong.
//
// For a Parquet file, its columns tell.
func Conversational(path string, alpaca bool) bool {
	if IsParquet(path) {
		return parquetConversational(path, alpaca)
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	keys := [][]byte{[]byte(`"` + fMessages + `"`), []byte(`"` + fConversations + `"`)}
	if !alpaca {
		keys = append(keys, []byte(`"`+fInstruction+`"`))
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, MaxLineBytes)
	for sc.Scan() {
		line := sc.Bytes()
		named := false
		for _, k := range keys {
			named = named || bytes.Contains(line, k)
		}
		if !named {
			continue
		}
		if _, kind, err := decodeRow(line); err == nil && (kind == fMessages || kind == fConversations || (kind == fInstruction && !alpaca)) {
			return true
		}
	}
	return false
}
