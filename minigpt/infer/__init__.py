"""Using a trained model: loading one for use (loading), the token-level sampler and KV-cached
decoding (decode), samples for prompts (sample), evaluation (evaluate) and per-character scores
(score). The checkpoint format it reads is minigpt/checkpoint.py. Nothing of training is imported here."""
