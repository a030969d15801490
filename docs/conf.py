"""Sphinx configuration of symjac's documentation.

Build strictly (every warning, including a broken reference, is an error):
    python -m sphinx -W --keep-going -n -b html docs docs/_build/html
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
os.environ.setdefault("SYMJAC_COMPILE", "never")  # importing symjac for autodoc needs no kernels

project = "symjac"
author = "the symjac developers"
copyright = "the symjac developers"  # noqa: A001 (Sphinx's setting name)

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3

nitpicky = True  # a reference that does not resolve is a warning, and -W makes it an error
autodoc_typehints = "none"  # signatures name types (Callable, np.ndarray) whose docs are not part of this site
autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = "symjac"
html_static_path = ["_static"]
pygments_style = "friendly"
