"""Sphinx configuration: the guides (markdown, through MyST) and the API reference (numpydoc docstrings).

Build with ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` after
``pip install ".[docs]"``; warnings are errors.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import sgmc  # noqa: E402

project = "sgmc"
author = "The sgmc developers"
copyright = "the sgmc developers"  # noqa: A001
release = sgmc.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "numpydoc",
]

root_doc = "contents"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set = set()

html_theme = "alabaster"
html_title = f"sgmc {release}"
