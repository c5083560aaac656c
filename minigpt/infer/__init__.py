"""Using a trained model: checkpoints (checkpoint), loading one for use (loading), the token-level
sampler and KV-cached decoding (decode), samples for prompts (sample), evaluation (evaluate) and
per-character scores (score). Nothing of training is imported here."""
