"""Stage 3, derivatives: the chain rule on the DAG, and what each product computes."""
