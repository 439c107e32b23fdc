package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const testCorpusBytes = 300_000

var dataFiles = []string{
	"corpus/pretrain.jsonl", "corpus/README.md",
	"tasks/dates/train.jsonl", "tasks/dates/val.jsonl", "tasks/dates/test.jsonl",
	"tasks/dates/prompts.txt", "tasks/dates/README.md",
	"tasks/dates-chat/train.jsonl", "tasks/dates-chat/val.jsonl", "tasks/dates-chat/test.jsonl", "tasks/dates-chat/README.md",
}

// generate writes the data for seed into a fresh directory and returns it.
func generate(t *testing.T, seed uint64) string {
	t.Helper()
	dir := t.TempDir()
	c := config{out: dir, seed: seed, corpusBytes: testCorpusBytes, nTrain: defaultTrain, nVal: defaultVal, nTest: defaultTest}
	if err := run(c, io.Discard); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lines splits a JSONL file and decodes each line into a map of strings,
// failing on any other value type.
func jsonlRows(t *testing.T, b []byte) []map[string]string {
	t.Helper()
	var rows []map[string]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]string
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("row %d: %v", len(rows)+1, err)
		}
		rows = append(rows, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestDeterminism(t *testing.T) {
	a, b, c := generate(t, 1), generate(t, 1), generate(t, 2)
	for _, name := range dataFiles {
		if !bytes.Equal(readFile(t, a, name), readFile(t, b, name)) {
			t.Errorf("%s differs between two runs with seed 1", name)
		}
		if strings.HasSuffix(name, ".jsonl") && bytes.Equal(readFile(t, a, name), readFile(t, c, name)) {
			t.Errorf("%s is the same for seeds 1 and 2", name)
		}
	}
}

var (
	isoFind   = regexp.MustCompile(`\d{4}-\d{2}-\d{2}`)
	monthFind = regexp.MustCompile(`\b(January|February|March|April|May|June|July|August|September|October|November|December)\b`)
)

func TestCorpusRows(t *testing.T) {
	dir := generate(t, 1)
	b := readFile(t, dir, "corpus/pretrain.jsonl")
	if len(b) < testCorpusBytes || len(b) > testCorpusBytes+2*maxRow {
		t.Errorf("corpus is %d bytes, want about %d", len(b), testCorpusBytes)
	}
	rows := jsonlRows(t, b)
	var isoRows, longRows int
	for i, row := range rows {
		if len(row) != 1 || row["text"] == "" {
			t.Fatalf("row %d: want exactly a non-empty text field, got %v", i+1, row)
		}
		s := row["text"]
		if len(s) < minRow || len(s) > maxRow {
			t.Errorf("row %d has %d bytes, want %d..%d", i+1, len(s), minRow, maxRow)
		}
		for j := 0; j < len(s); j++ {
			if c := s[j]; c != '\n' && (c < ' ' || c > '~') {
				t.Fatalf("row %d: byte %#x", i+1, c)
			}
		}
		isos := isoFind.FindAllString(s, -1)
		// The rule of the brief: no ISO date next to its own long form.
		for _, iso := range isos {
			d, err := time.Parse("2006-01-02", iso)
			if err != nil {
				t.Fatalf("row %d: bad ISO date %q: %v", i+1, iso, err)
			}
			day := fromTime(d)
			for _, long := range []string{d.Format("January 2, 2006"), d.Format("2 January 2006"), day.ofMonth(), day.monthDay(), day.monthOrd()} {
				if strings.Contains(s, long) {
					t.Fatalf("row %d pairs %s with %q: %q", i+1, iso, long, s)
				}
			}
		}
		// The stricter rule the generator keeps: no month name at all
		// in a row with an ISO date.
		months := monthFind.MatchString(s)
		if len(isos) > 0 && months {
			t.Fatalf("row %d has an ISO date and a month name: %q", i+1, s)
		}
		if len(isos) > 0 {
			isoRows++
		}
		if months {
			longRows++
		}
	}
	// Both forms must be common for the task to make sense.
	if isoRows < len(rows)/10 || longRows < len(rows)/3 {
		t.Errorf("%d rows: %d with ISO dates, %d with month names; want both common", len(rows), isoRows, longRows)
	}
}

var promptRE = regexp.MustCompile(`^Date: (\d{4}-\d{2}-\d{2})\nIn words:$`)

// taskDates checks the rows of one split and returns their dates.
func taskDates(t *testing.T, name string, b []byte) []time.Time {
	t.Helper()
	var out []time.Time
	for i, row := range jsonlRows(t, b) {
		p, ok1 := row["prompt"]
		c, ok2 := row["completion"]
		if len(row) != 2 || !ok1 || !ok2 {
			t.Fatalf("%s row %d: want exactly prompt and completion, got %v", name, i+1, row)
		}
		if len(p) > maxPromptBytes || len(c) > maxCompletionBytes {
			t.Errorf("%s row %d too long: %q %q", name, i+1, p, c)
		}
		m := promptRE.FindStringSubmatch(p)
		if m == nil {
			t.Fatalf("%s row %d: bad prompt %q", name, i+1, p)
		}
		d, err := time.Parse("2006-01-02", m[1])
		if err != nil {
			t.Fatalf("%s row %d: %v", name, i+1, err)
		}
		if want := " " + d.Format("January 2, 2006"); c != want {
			t.Errorf("%s row %d: completion %q, want %q", name, i+1, c, want)
		}
		if d.Year() < minYear || d.Year() > maxYear {
			t.Errorf("%s row %d: year %d out of range", name, i+1, d.Year())
		}
		out = append(out, d)
	}
	return out
}

func TestTaskSplits(t *testing.T) {
	dir := generate(t, 1)
	seen := map[time.Time]string{}
	for _, split := range []struct {
		name string
		n    int
	}{{"train", defaultTrain}, {"val", defaultVal}, {"test", defaultTest}} {
		name := "tasks/dates/" + split.name + ".jsonl"
		ds := taskDates(t, name, readFile(t, dir, name))
		if len(ds) != split.n {
			t.Errorf("%s has %d rows, want %d", name, len(ds), split.n)
		}
		var months [12]int
		for _, d := range ds {
			if other, ok := seen[d]; ok {
				t.Errorf("%s is in %s and in %s", d.Format(time.DateOnly), other, name)
			}
			seen[d] = name
			months[d.Month()-1]++
		}
		lo, hi := months[0], months[0]
		for _, k := range months {
			lo, hi = min(lo, k), max(hi, k)
		}
		if hi-lo > 1 {
			t.Errorf("%s is not balanced over months: %v", name, months)
		}
	}

	// prompts.txt: 5 JSON strings, the first test prompts.
	test := jsonlRows(t, readFile(t, dir, "tasks/dates/test.jsonl"))
	lines := strings.Split(strings.TrimSuffix(string(readFile(t, dir, "tasks/dates/prompts.txt")), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("prompts.txt has %d lines, want 5", len(lines))
	}
	for i, l := range lines {
		var p string
		if err := json.Unmarshal([]byte(l), &p); err != nil || p != test[i]["prompt"] {
			t.Errorf("prompts.txt line %d = %s, want test prompt %q (%v)", i+1, l, test[i]["prompt"], err)
		}
	}
}

func TestLeapYears(t *testing.T) {
	for _, c := range []struct {
		d    date
		want bool
	}{
		{date{2000, time.February, 29}, true},
		{date{2024, time.February, 29}, true},
		{date{2023, time.February, 29}, false},
		{date{1900, time.February, 29}, false},
		{date{2100, time.February, 29}, false},
		{date{2021, time.April, 31}, false},
		{date{2021, time.December, 31}, true},
	} {
		if got := c.d.valid(); got != c.want {
			t.Errorf("%v valid = %v, want %v", c.d, got, c.want)
		}
	}
	all := allDates()
	n := 0
	has := map[date]bool{}
	for _, ds := range all {
		for _, d := range ds {
			n++
			has[d] = true
			if !d.valid() || d.y < minYear || d.y > maxYear {
				t.Fatalf("allDates holds %v", d)
			}
		}
	}
	first := time.Date(minYear, 1, 1, 0, 0, 0, 0, time.UTC)
	last := time.Date(maxYear, 12, 31, 0, 0, 0, 0, time.UTC)
	if want := int(last.Sub(first).Hours()/24) + 1; n != want {
		t.Errorf("allDates has %d days, want %d", n, want)
	}
	if !has[date{2000, time.February, 29}] || has[date{2023, time.February, 29}] || has[date{1900, time.January, 1}] {
		t.Error("allDates: wrong leap days or range")
	}

	// Across many seeds, every February 29 drawn is in a leap year, and
	// some are drawn.
	leapDays := 0
	for seed := uint64(1); seed <= 20; seed++ {
		sp, err := generateTasks(seed, defaultTrain, defaultVal, defaultTest)
		if err != nil {
			t.Fatal(err)
		}
		for _, ds := range [][]date{sp.train, sp.val, sp.test} {
			for _, d := range ds {
				if d.m == time.February && d.d == 29 {
					leapDays++
					if !isLeap(d.y) {
						t.Errorf("seed %d: %s is not a day", seed, d.iso())
					}
				}
			}
		}
	}
	if leapDays == 0 {
		t.Error("no February 29 in 20 seeds")
	}
}

func TestWords(t *testing.T) {
	for n, want := range map[int]string{
		0: "zero", 13: "thirteen", 40: "forty", 47: "forty-seven", 100: "one hundred",
		305: "three hundred and five", 999: "nine hundred and ninety-nine",
		1000: "one thousand", 2021: "two thousand and twenty-one", 1950: "one thousand nine hundred and fifty",
	} {
		if got := words(n); got != want {
			t.Errorf("words(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 22: "22nd", 23: "23rd", 31: "31st"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int]string{7: "seventh", 12: "twelfth", 20: "twentieth", 21: "twenty-first", 30: "thirtieth", 31: "thirty-first"} {
		if got := ordinalWord(n); got != want {
			t.Errorf("ordinalWord(%d) = %q, want %q", n, got, want)
		}
	}
	if got := join([]string{"a", "b", "c"}); got != "a, b, and c" {
		t.Errorf("join = %q", got)
	}
}

// TestCheckedInData regenerates the default data set and compares it with
// the files in the repository, so that edits to the templates cannot leave
// stale data behind.
func TestCheckedInData(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerates the full corpus")
	}
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "corpus", "pretrain.jsonl")); err != nil {
		t.Skip("no generated data in the checkout:", err)
	}
	dir := t.TempDir()
	c := config{out: dir, seed: 1, corpusBytes: defaultCorpusBytes, nTrain: defaultTrain, nVal: defaultVal, nTest: defaultTest}
	if err := run(c, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, name := range dataFiles {
		if !bytes.Equal(readFile(t, dir, name), readFile(t, root, name)) {
			t.Errorf("%s is stale: run %s", name, c.command())
		}
	}
}
