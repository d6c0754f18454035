"""Training with Accelerate: config (TrainConfig), data (load -> tokenize -> pack, cached), train (the loop),
checkpoint (atomic save, verified resume) and run_log (JSONL log, summary, loss curve)."""
