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
	fs := newFlags("tokenize", "tokenize (--model DIR | --tokenizer FILE) [--chat [--no-generation-prompt]] [--decode] [--json] TEXT | --file F", stderr)
	var c train.TokenizeConfig
	fs.StringVar(&c.Model, "model", "", "model or tokenizer directory: its tokenizer.json and tokenizer_config.json (config.json is optional)")
	textFlags(fs, &c.Text)
	fs.BoolVar(&c.Chat, "chat", false, "render the input through the chat template first, ending with the generation prompt: a JSON list of messages, or one user message")
	fs.BoolVar(&c.NoGenerationPrompt, "no-generation-prompt", false, "with --chat: render the conversation without the generation prompt (as a training conversation is rendered)")
	fs.BoolVar(&c.Decode, "decode", false, "read the input as token ids (spaces or commas between them) and print their text")
	file := fs.String("file", "", "read the input from this file instead of the argument")
	asJSON := fs.Bool("json", false, "print a JSON object")
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	switch {
	case c.Model == "" && (c.Text.Tokenizer == "auto" || c.Text.Tokenizer == ""):
		return usageError{"--model DIR (or --tokenizer with a tokenizer.json path) is required"}
	case c.NoGenerationPrompt && !c.Chat:
		return usageError{"--no-generation-prompt applies to --chat"}
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
