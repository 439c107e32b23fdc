// Package data turns fine-tuning data into training batches for causal
// language models.
//
// It provides a Tokenizer interface with a dependency-free byte-level
// implementation, a JSONL reader that turns rows of text, prompt/completion
// pairs or pre-tokenized ids into Examples, a deterministic train/validation
// Split, and a Loader that pads or packs Examples into fixed-shape
// micro-batches.
//
// Batches carry labels that are already shifted: Inputs[i] is the token the
// model sees and Targets[i] is the token it must predict there, or IgnoreIndex
// where no loss is taken. The order in which a Loader yields batches is a pure
// function of its configuration, its seed and the epoch number, so a run
// resumed from a LoaderState sees exactly the batches an uninterrupted run
// would have seen.
package data
