"""Stage 5, the runtime: call keys, compiled programs, caches in memory and on disk, batches."""
