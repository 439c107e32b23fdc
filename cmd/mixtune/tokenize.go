package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/train"
)

func cmdTokenize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "tokenize --model DIR [--chat] [--decode] [--json] TEXT | --file F", stderr)
	var c train.TokenizeConfig
	fs.StringVar(&c.Model, "model", "", "model directory (its tokenizer.json, tokenizer_config.json, config.json)")
	textFlags(fs, &c.Text)
	fs.BoolVar(&c.Chat, "chat", false, "render the input through the chat template with the generation prompt first: a JSON list of messages, or one user message")
	fs.BoolVar(&c.Decode, "decode", false, "read the input as token ids (spaces or commas between them) and print their text")
	file := fs.String("file", "", "read the input from this file instead of the argument")
	asJSON := fs.Bool("json", false, "print a JSON object")
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	switch {
	case c.Model == "":
		return usageError{"--model is required"}
	case *file != "" && fs.NArg() > 0, *file == "" && fs.NArg() != 1:
		return usageError{"give the input as one argument or with --file"}
	case *file != "":
		b, err := readlimit.ReadFile(*file, readlimit.Text)
		if err != nil {
			return usageError{err.Error()}
		}
		c.Input = string(b)
	default:
		c.Input = fs.Arg(0)
	}
	out, err := train.Tokenize(c)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(out)
	}
	if c.Decode {
		_, err := fmt.Fprintln(stdout, out.Text)
		return err
	}
	// buffered: a line per token, unbuffered, is a write call per token
	w := bufio.NewWriter(stdout)
	if out.Rendered {
		fmt.Fprintf(w, "rendered with %s:\n%s\n\n", out.Template, out.Text)
	}
	for i, id := range out.IDs {
		fmt.Fprintf(w, "%6d  %-12s %d:%d\n", id, strconv.Quote(out.Pieces[i]), out.Spans[i][0], out.Spans[i][1])
	}
	fmt.Fprintf(w, "%d tokens\n", len(out.IDs))
	if out.Note != "" {
		fmt.Fprintln(w, "note: "+out.Note)
	}
	return w.Flush()
}
