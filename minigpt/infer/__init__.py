"""Using a trained model: loading (loading), the sampler and KV-cached decoding (decode), samples for
prompts (sample), evaluation (evaluate), per-character scores (score). Nothing of training is imported."""
