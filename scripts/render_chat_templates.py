#!/usr/bin/env python3
"""Reference renders for Tandem's Jinja subset, made with the real jinja2.

Renders every tests/data/chat_templates/*.jinja with every conversation of
conversations.json, and every snippet of language_cases.json, the way Hugging
Face transformers' apply_chat_template does (an ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks and the loopcontrols extension; globals
raise_exception and strftime_now; transformers' tojson filter), and writes
the outputs, or the errors raised, to expected.json. The C++ tests
(tests/test_chat_template.cpp, tests/test_jinja.cpp) compare against it byte
for byte.

  python3 scripts/render_chat_templates.py          # rewrite expected.json
  python3 scripts/render_chat_templates.py --check  # exit 1 if it differs
"""
import argparse
import datetime
import json
import pathlib
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

DATA = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "chat_templates"
FIXED_DATE = datetime.datetime(2024, 7, 26)


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """What raise_exception() throws, told apart from jinja2's own errors."""


def raise_exception(message):
    raise RaisedByTemplate(message)


def strftime_now(fmt):
    return FIXED_DATE.strftime(fmt)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' own tojson: no HTML escaping, keys in their order.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_env():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    try:
        return {"output": env.from_string(source).render(**context)}
    except RaisedByTemplate as e:
        return {"error": str(e), "raised": True}
    except Exception as e:  # jinja2's errors and Python's (TypeError...) alike
        return {"error": f"{type(e).__name__}: {e}", "raised": False}


def render_all():
    env = make_env()
    conv = json.loads((DATA / "conversations.json").read_text(encoding="utf-8"))
    chat = {}
    for path in sorted(DATA.glob("*.jinja")):
        name = path.stem
        # Read as bytes: jinja2 sees the file's exact text.
        source = path.read_bytes().decode("utf-8")
        tokens = dict(conv["default_tokens"])
        tokens.update(conv["template_tokens"].get(name, {}))
        results = {}
        for c in conv["conversations"]:
            context = {"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"], **tokens}
            if "tools" in c:
                context["tools"] = c["tools"]
            context.update(c.get("extra", {}))
            results[c["name"]] = render(env, source, context)
        chat[name] = {"tokens": tokens, "results": results}
    cases = json.loads((DATA / "language_cases.json").read_text(encoding="utf-8"))
    language = {c["name"]: render(env, c["template"], c["context"]) for c in cases["cases"]}
    return {"jinja2_version": jinja2.__version__, "chat": chat, "language": language}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed expected.json instead of writing it")
    args = ap.parse_args()
    fresh = render_all()
    out = DATA / "expected.json"
    if args.check:
        committed = json.loads(out.read_text(encoding="utf-8"))
        committed.pop("jinja2_version", None)
        version = fresh.pop("jinja2_version")
        if committed != fresh:
            diffs = []
            for section in ("chat", "language"):
                a, b = committed.get(section, {}), fresh.get(section, {})
                diffs += [f"{section}/{k}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            print(f"expected.json differs from jinja2 {version}'s renders: {', '.join(diffs)}", file=sys.stderr)
            return 1
        print(f"expected.json matches jinja2 {version}")
        return 0
    out.write_text(json.dumps(fresh, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
