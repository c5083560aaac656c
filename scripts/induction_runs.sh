#!/usr/bin/env bash
# Olsson et al. (2022) on 2 CPU cores: attention-only models of one and two layers trained on tiny
# Shakespeare, three seeds each, with a snapshot every 50 steps; then the formation of their heads
# (`minigpt heads --over-training`), their heads at the end and their loss by position.
# The figures in docs/inside.md come from this script. Usage: bash scripts/induction_runs.sh [OUT]
set -euo pipefail
out="${1:-runs/induction}"
mkdir -p "$out"
for layers in 1 2; do
  for seed in 1 2 3; do
    run="$out/attn${layers}_seed${seed}"
    [ -f "$run/results.json" ] || uv run minigpt train --out "$run" --resume auto \
      model.attn_only=true model.n_layer="$layers" model.n_head=4 model.n_embd=128 model.block_size=128 \
      train.max_steps=800 train.batch_size=16 train.eval_interval=200 train.keep_every=50 train.seed="$seed" \
      log.attention_probe= log.progress=lines
    uv run minigpt heads "$run" --over-training --json > "$run/formation.jsonl"
    uv run minigpt heads "$run" --over-training --png "$run/formation.png" > /dev/null
    uv run minigpt heads "$run" --json > "$run/heads.jsonl"
    uv run minigpt eval "$run" --by-position --json > "$run/by_position.json"
  done
done
