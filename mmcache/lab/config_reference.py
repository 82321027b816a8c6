"""The configuration reference, generated from the schema in :mod:`mmcache.config`.

:func:`markdown` walks the schema's dataclasses (every key's type, default and meaning,
from :data:`mmcache.config.KEY_HELP`) and writes the reference as Markdown. The docs build
adds it to the site as ``configuration.md`` (:mod:`mmcache.lab.mkdocs_hooks`); nothing is
hand-written. To print or write it::

    python -m mmcache.lab.config_reference [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Iterator

from mmcache.config import EXAMPLE_YAML, KEY_HELP, CacheConfig

PAGE = "configuration.md"


@dataclasses.dataclass(frozen=True)
class Key:
    """One config key: its dotted name, type, default and meaning."""

    name: str
    type: str
    default: str
    help: str


def sections(schema: type = CacheConfig) -> list[tuple[str, type]]:
    """The schema's sections in order, as (dotted prefix, dataclass): ``("", CacheConfig)``
    first, then each nested dataclass field (``("l1", MemoryTierConfig)``, ...)."""
    out = [("", schema)]
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if dataclasses.is_dataclass(hints[f.name]):
            out += [(f"{f.name}.{p}".rstrip("."), cls) for p, cls in sections(hints[f.name])]
    return out


def keys(schema: type, prefix: str = "") -> Iterator[Key]:
    """The keys of one section (nested sections are their own), in schema order.

    Raises ValueError naming a key that :data:`mmcache.config.KEY_HELP` does not explain,
    or a help entry that names no key."""
    helps = KEY_HELP.get(schema, {})
    names = [f.name for f in dataclasses.fields(schema)]
    stale = sorted(set(helps) - set(names))
    if stale:
        raise ValueError(f"KEY_HELP[{schema.__name__}] names no such key: {stale}")
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.name not in helps:
            raise ValueError(f"config key {prefix + f.name!r} ({schema.__name__}.{f.name}) has "
                             "no help in mmcache.config.KEY_HELP")
        hint = hints[f.name]
        nested = dataclasses.is_dataclass(hint)
        yield Key(prefix + f.name, "section" if nested else type_name(hint),
                  "" if nested else default_text(f), helps[f.name])


def type_name(hint: Any) -> str:
    """A type as the reference writes it: ``int or null``, ``mapping str → float``, ..."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any"
    if hint is type(None):
        return "null"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is dict:
        return f"mapping {type_name(args[0])} → {type_name(args[1])}"
    if origin is list:
        return f"list of {type_name(args[0])}"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(hint, hint.__name__)


def default_text(f: dataclasses.Field) -> str:
    """A field's default as YAML/JSON text (``null``, ``true``, ``"lru"``, ``{}``)."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    return json.dumps(value, ensure_ascii=False)


def markdown(schema: type = CacheConfig) -> str:
    """The configuration reference: every key of ``schema``, by section, as Markdown."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from the schema in mmcache/config.py by mmcache.lab.config_reference; "
        "do not edit. -->",
        "",
        "A `TieredCache` takes a `mmcache.CacheConfig`, a dict of the same shape, or the path of "
        "a YAML file. Unknown keys and bad values raise `mmcache.errors.ConfigError` naming the "
        "key. Every key below is optional; times are seconds, sizes bytes.",
        "",
        "```yaml",
        EXAMPLE_YAML.rstrip("\n"),
        "```",
    ]
    for prefix, cls in sections(schema):
        title = f"`{prefix}`" if prefix else "Top level"
        lines += ["", f"## {title}", ""]
        doc = inspect.cleandoc(cls.__doc__ or "")
        if doc and cls is not schema:
            lines += [_rst_to_md(doc), ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for key in keys(cls, f"{prefix}." if prefix else ""):
            default = f"`{key.default}`" if key.default else ""
            meaning = key.help + (f" See [`{key.name}`](#{key.name})." if key.type == "section"
                                  else "")
            lines.append(f"| `{key.name}` | {_cell(key.type)} | {_cell(default)} | "
                         f"{_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def _rst_to_md(text: str) -> str:
    """Docstring markup as Markdown: ``x`` and :role:`x` become `x`."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmcache.lab.config_reference",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the reference here instead of printing it")
    args = parser.parse_args(argv)
    text = markdown()
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
