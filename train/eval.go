package train

import (
	"context"
	"fmt"
	"math"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/internal/jsonfloat"
	"github.com/mixtune/mixtune/model"
)

// LossReport is a mean loss per target token.
type LossReport struct {
	Loss       jsonfloat.Float `json:"loss"`
	Perplexity jsonfloat.Float `json:"perplexity"`
	Tokens     int             `json:"tokens"`
	Batches    int             `json:"batches"`
}

// evaluate returns the token-weighted mean loss over batches: each batch's
// mean times its target count, summed in batch order, over all targets.
// Training's validation and `mixtune eval` both call it, so they agree.
// Cancelling ctx stops it before the next batch with ErrInterrupted.
func evaluate(ctx context.Context, ru *runner, batches []data.Batch) (LossReport, error) {
	stop := func() error {
		if ctx.Err() != nil {
			return ErrInterrupted
		}
		return nil
	}
	sum, n, err := sumLosses(ru, batches, func(bt data.Batch) data.Batch { return bt }, stop)
	if err != nil {
		return LossReport{}, err
	}
	return lossReport(sum, n, len(batches))
}

// sumLosses is the summed loss of each batch's part (part(batch): a data-
// parallel rank's rows) over its target tokens, and their count. stop is
// asked before every batch (on every rank, whether or not its part has
// targets, so that a collective stop check stays in step); its error ends
// the sum.
func sumLosses(ru *runner, batches []data.Batch, part func(data.Batch) data.Batch, stop func() error) (sum float64, n int, err error) {
	for _, bt := range batches {
		if err := stop(); err != nil {
			return 0, 0, err
		}
		bt = part(bt)
		if bt.NumTargets == 0 {
			continue
		}
		loss, err := ru.run(bt, 0, true, 0)
		if err != nil {
			return 0, 0, err
		}
		sum += loss * float64(bt.NumTargets)
		n += bt.NumTargets
	}
	return sum, n, nil
}

// lossReport is the mean of a summed loss over n target tokens.
func lossReport(sum float64, n, batches int) (LossReport, error) {
	if n == 0 {
		return LossReport{}, fmt.Errorf("no target tokens to evaluate")
	}
	mean := sum / float64(n)
	return LossReport{Loss: jsonfloat.Float(mean), Perplexity: jsonfloat.Float(math.Exp(mean)), Tokens: n, Batches: batches}, nil
}

// TaskReport is the exact-match accuracy of greedy answers.
type TaskReport struct {
	// Engine is where the answers were generated: "cpu", or "vulkan: "
	// and the device.
	Engine   string    `json:"engine,omitempty"`
	Correct  int       `json:"correct"`
	Total    int       `json:"total"`
	Accuracy float64   `json:"accuracy"`
	Samples  []Attempt `json:"samples,omitempty"`
}

// Attempt is one task question, its expected answer and what the model said.
// Prompt is the question as the model sees it, special tokens written out.
type Attempt struct {
	Prompt string `json:"prompt"`
	Want   string `json:"want"`
	Got    string `json:"got"`
}

// taskSet is a task file's questions: prompt ids and expected answers.
type taskSet struct {
	prompts [][]int
	wants   []string
}

// loadTask reads the first limit (0: all) questions of a task file:
// prompt/completion rows, or conversations ending with the answer.
func loadTask(path string, f data.Format, limit int) (*taskSet, error) {
	tasks, err := data.LoadTasks(path, f, limit)
	if err != nil {
		return nil, err
	}
	ts := &taskSet{}
	for _, t := range tasks {
		ts.prompts = append(ts.prompts, t.Prompt)
		ts.wants = append(ts.wants, t.Want)
	}
	return ts, nil
}

// accuracy generates with d a greedy answer to each prompt, up to a stop
// id, and counts exact matches of the decoded text. Cancelling ctx stops
// it before the next token with ErrInterrupted.
func (ts *taskSet) accuracy(ctx context.Context, d *model.Decoder, tok data.Tokenizer, stop []int, maxNew int) (TaskReport, error) {
	if len(stop) > 0 {
		d.Stop = stop
	}
	outs, err := d.GenerateContext(ctx, ts.prompts, maxNew, model.Sampling{})
	if ctx.Err() != nil {
		return TaskReport{}, ErrInterrupted
	}
	if err != nil {
		return TaskReport{}, err
	}
	rep := TaskReport{Total: len(ts.prompts)}
	for i, out := range outs {
		got := tok.Decode(out)
		if got == ts.wants[i] {
			rep.Correct++
		}
		if len(rep.Samples) < 3 {
			rep.Samples = append(rep.Samples, Attempt{Prompt: seenText(tok, ts.prompts[i]), Want: ts.wants[i], Got: got})
		}
	}
	rep.Accuracy = float64(rep.Correct) / float64(max(rep.Total, 1))
	return rep, nil
}

// EvalConfig is `mixtune eval`: a model, an optional adapter, a JSONL file,
// and the batching that decides how rows become sequences. Use the
// training recipe's seq_len, batch_size and mode to reproduce its
// validation loss exactly.
type EvalConfig struct {
	Model, Adapter, Data string
	SeqLen, BatchSize    int
	Mode                 data.Mode
	Text                 TextConfig // the recipe's tokenizer, chat template and loss mode
	BLAS                 blas.Kind
	Threads              int
	// VulkanDevice, when set, computes on the Vulkan engine on that
	// device (an index, UUID or PCI bus id), as compute.vulkan_device
	// names one.
	VulkanDevice string
}

// Eval computes the mean loss per target token and the perplexity. A
// batch size above the rows there are is clamped to them.
func Eval(c EvalConfig) (LossReport, error) {
	eng, _, err := openEngine(ComputeConfig{BLAS: c.BLAS, Threads: c.Threads})
	if err != nil {
		return LossReport{}, err
	}
	m, lora, err := loadWithAdapter(c.Model, c.Adapter)
	if err != nil {
		return LossReport{}, inputError(err)
	}
	if c.SeqLen > m.Config.MaxPositionEmbeddings {
		return LossReport{}, inputError(fmt.Errorf("--seq-len %d exceeds the model's max_position_embeddings (%d)", c.SeqLen, m.Config.MaxPositionEmbeddings))
	}
	text, err := loadText(c.Model, m.Config.VocabSize, c.Text)
	if err != nil {
		return LossReport{}, inputError(err)
	}
	tok := text.Format.Tok
	ex, err := data.LoadJSONL(c.Data, text.Format)
	if err != nil {
		return LossReport{}, inputError(err)
	}
	d := DataConfig{SeqLen: c.SeqLen, Mode: c.Mode}
	l, err := newLoader(ex, d, c.BatchSize, false, 0, tok)
	if err != nil {
		return LossReport{}, inputError(err)
	}
	if rows := l.Stats().Rows; rows < c.BatchSize {
		if l, err = newLoader(ex, d, rows, false, 0, tok); err != nil {
			return LossReport{}, inputError(err)
		}
		c.BatchSize = rows
	}
	if l.Stats().TargetTokens == 0 {
		return LossReport{}, inputError(fmt.Errorf("%s: no row has a target token within --seq-len %d", c.Data, c.SeqLen))
	}
	var o graphOptions
	if c.VulkanDevice != "" {
		g, err := openVulkanFlag(c.VulkanDevice)
		if err != nil {
			return LossReport{}, err
		}
		defer g.close()
		o.gpu = g
		compactStored(m) // 16-bit matrices stay 16-bit on the device: their exact values, half the memory
	}
	ru, err := buildRunner(eng, m, lora, c.BatchSize, c.SeqLen, nil, nil, o)
	if err != nil {
		return LossReport{}, tooSmallForFlag(c.VulkanDevice, err)
	}
	defer ru.close()
	rep, err := evaluate(context.Background(), ru, l.Batches())
	return rep, tooSmallForFlag(c.VulkanDevice, err)
}

// openVulkanFlag opens the Vulkan engine on the device a --vulkan-device
// flag names, for fp32 work; a device it cannot open is bad input.
func openVulkanFlag(spec string) (*gpuEngine, error) {
	g, _, err := openGPU(ComputeConfig{Device: ComputeGPU, VulkanDevice: spec}, device.Selection{}, amp.FP32)
	if err != nil {
		return nil, inputError(fmt.Errorf("--vulkan-device %s: %w", spec, err))
	}
	return g, nil
}

// compactStored keeps each matrix of m that its checkpoint stores as bf16
// or fp16 as 16-bit values of that format, which are its exact values.
func compactStored(m *model.Model) {
	for _, s := range []struct {
		f    amp.Format
		name string
	}{{amp.BF16, "BF16"}, {amp.FP16, "F16"}} {
		m.Compact(s.f, func(w string) bool { return m.Stored[w] == s.name })
	}
}

// tooSmallForFlag makes a device too small for the work (out of memory, or
// a buffer larger than it makes) bad input naming --vulkan-device, with
// what to do; other errors pass through.
func tooSmallForFlag(spec string, err error) error {
	if spec == "" || !deviceTooSmall(err) {
		return err
	}
	return inputError(fmt.Errorf("--vulkan-device %s: the device is too small for this model and batch (%w); leave out --vulkan-device to compute on the cpu, or lower --batch-size", spec, err))
}

// roomToGenerate refuses a prompt of n tokens (BOS and any chat template
// included) that leaves no position of a context of ctx for a new token.
func roomToGenerate(n, ctx int) error {
	switch {
	case n > ctx:
		return fmt.Errorf("--prompt is %d tokens, longer than the model's context of %d (max_position_embeddings in config.json); shorten it", n, ctx)
	case n == ctx:
		return fmt.Errorf("--prompt is %d tokens, which fills the model's context of %d (max_position_embeddings in config.json): there is no room to generate; shorten it", n, ctx)
	}
	return nil
}

// GenerateConfig is `mixtune generate`.
type GenerateConfig struct {
	Model, Adapter, Prompt string
	// Chat sends Prompt as a user turn through the chat template, with the
	// generation prompt, instead of continuing it as text.
	Chat         bool
	System       string // with Chat: a system turn first
	Text         TextConfig
	MaxNewTokens int
	Sampling     model.Sampling
	BLAS         blas.Kind
	// VulkanDevice, when set, decodes on the Vulkan engine on that device
	// (an index, UUID or PCI bus id), as compute.vulkan_device names one.
	VulkanDevice string
}

// Generate continues a prompt, or answers it as a chat model, and returns
// the new text. Generation stops at any of the model's end-of-sequence
// ids.
func Generate(c GenerateConfig) (string, error) {
	eng, _, err := openEngine(ComputeConfig{BLAS: c.BLAS})
	if err != nil {
		return "", err
	}
	m, lora, err := loadWithAdapter(c.Model, c.Adapter)
	if err != nil {
		return "", inputError(err)
	}
	text, err := loadText(c.Model, m.Config.VocabSize, c.Text)
	if err != nil {
		return "", inputError(err)
	}
	prompt, err := text.prompt(c.Prompt, c.System, c.Chat)
	if err != nil {
		return "", inputError(err)
	}
	if err := roomToGenerate(len(prompt), m.Config.MaxPositionEmbeddings); err != nil {
		return "", inputError(err)
	}
	var d *model.Decoder
	if c.VulkanDevice != "" {
		g, err := openVulkanFlag(c.VulkanDevice)
		if err != nil {
			return "", err
		}
		defer g.close()
		// On the device the matrices stored in 16 bits stay so (fp32
		// compute widens them exactly) and the adapter is unmerged: half
		// the memory of merged fp32 weights, the same function to fp32
		// rounding.
		compactStored(m)
		var done func()
		d, done = deviceDecoder(m, lora, eng.BLAS, g, nil)
		defer done()
	} else {
		w, err := mergedWeights(m, lora)
		if err != nil {
			return "", err
		}
		d = model.NewDecoder(m, w, eng.BLAS)
	}
	if len(text.Stop) > 0 {
		d.Stop = text.Stop
	}
	out, err := d.Generate([][]int{prompt}, c.MaxNewTokens, c.Sampling)
	if err != nil {
		return "", tooSmallForFlag(c.VulkanDevice, err)
	}
	return text.Format.Tok.Decode(out[0]), nil
}
