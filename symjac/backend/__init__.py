"""Stage 4, kernels: the DAG lowered to an SSA program, and the code that runs it."""
