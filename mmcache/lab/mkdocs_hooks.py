"""mkdocs hooks (``hooks:`` in ``mkdocs.yml``): what the docs build adds to the pages.

- ``configuration.md`` is generated from the schema (:mod:`mmcache.lab.config_reference`).
- Docstrings are written in reST: the API reference shows ``:class:`x``` (and the other
  Sphinx roles) as plain code, as Markdown shows ``x``.
"""

from __future__ import annotations

import re
from typing import Any

from mkdocs.structure.files import File

# Absolute import: mkdocs loads this file by its path, outside the package.
from mmcache.lab.config_reference import PAGE, markdown

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj|ref):<code>~?")


def on_files(files: Any, config: Any) -> Any:
    """Add the generated configuration reference to the site."""
    files.append(File.generated(config, PAGE, content=markdown()))
    return files


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Drop the Sphinx role names left in front of the code they mark."""
    return _ROLE.sub("<code>", html)
