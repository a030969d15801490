"""Stage 1, the IR: symjac's expression DAG (``graph``) and its node types."""

# ops before anything else here: its records include numeric_ops', which build on ops' classes
from . import ops as _ops  # noqa: E402, F401
