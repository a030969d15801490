"""Beside the pipeline: showing results as SymPy, explaining products, generating docs."""
