"""Stage 2, tracing: NumPy code run on ``SymArray`` placeholders builds the DAG."""
