"""Stage 1, the IR: symjac's expression DAG (``graph``) and its node types."""
