"""Documentation generated from the code is up to date."""

from pathlib import Path

from symjac.show.docs import operations_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_operations_page_is_generated_from_the_primitive_table():
    page = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert page == operations_markdown(), "run `python -m symjac.show.docs` to regenerate docs/operations.md"
