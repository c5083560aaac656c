#!/usr/bin/env bash
# Issue 77's checks of the self-sizing four-minute recipe (configs/cpu_4min.yaml, train.auto on), one
# run at a time on a quiet machine except where said; prints one table row per run at the end.
#   bash scripts/recipe_check.sh [OUT] [PARTS]     PARTS: any of seeds slowed hand corpora (default: all)
#   PROSE=/path/text.txt RECORDS=/path/records.jsonl bash scripts/recipe_check.sh runs/check corpora
# seeds:   the recipe, seeds 1337 1 2 3 4 (its median is docs/recorded/cpu_4min.json's)
# slowed:  a host made slower: each run pinned to one core (taskset) while a second run keeps the
#          other core busy; the recipe's own choice there against hand shapes, at equal time
# hand:    the recipe (--auto, four minutes) against four hand shapes on tiny Shakespeare, at equal time
# corpora: --auto train.max_time=2m against four hand shapes (the ladder's 2 x 96 to 3 x 192) on a
#          prose text and a records file that no rule was tuned on
set -euo pipefail
out=${1:-runs/recipe_check}
parts=${2:-seeds slowed hand corpora}
mkdir -p "$out"
uv run python scripts/bench.py peak
grep -o -w 'amx_bf16\|avx512_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' '
echo
recipe="configs/cpu_4min.yaml log.progress=off"
shape() {  # n_layer n_embd n_head block_size batch_size: the keys of one hand shape
  echo "model.n_layer=$1 model.n_embd=$2 model.n_head=$3 model.block_size=$4 train.batch_size=$5"
}
if [[ $parts == *seeds* ]]; then
  for s in 1337 1 2 3 4; do
    uv run minigpt train $recipe train.seed=$s --out "$out/seed-$s"
  done
fi
if [[ $parts == *slowed* ]]; then
  # two pairs, side by side, one core each: the recipe's own choice with the narrowest hand shape,
  # then the fast host's 3 x 192 with 3 x 128
  taskset -c 0 uv run minigpt train $recipe --out "$out/slow-auto" &
  taskset -c 1 uv run minigpt train $recipe $(shape 3 96 4 128 16) --out "$out/slow-3x96" &
  wait
  taskset -c 0 uv run minigpt train $recipe $(shape 3 192 6 256 8) --out "$out/slow-3x192" &
  taskset -c 1 uv run minigpt train $recipe $(shape 3 128 4 128 16) --out "$out/slow-3x128" &
  wait
fi
if [[ $parts == *hand* ]]; then  # the recipe's four minutes on tiny Shakespeare, four hand shapes (seed-1337 is --auto's)
  uv run minigpt train $recipe --out "$out/hand-auto"  # again, in the same window
  uv run minigpt train $recipe $(shape 3 128 4 128 16) --out "$out/hand-3x128"
  uv run minigpt train $recipe $(shape 3 192 6 128 16) --out "$out/hand-3x192-c128"
  uv run minigpt train $recipe $(shape 4 192 6 256 8) --out "$out/hand-4x192"
  uv run minigpt train $recipe $(shape 4 256 8 128 16) --out "$out/hand-4x256"
fi
if [[ $parts == *corpora* ]]; then
  for corpus in prose records; do
    if [[ $corpus == prose ]]; then
      data=(--data "${PROSE:?PROSE=/path/to/prose.txt}")
    else
      data=(--data "${RECORDS:?RECORDS=/path/to/records.jsonl}" "data.text_field=[name,description]")
    fi
    two="--auto train.max_time=2m log.progress=off"
    uv run minigpt train "${data[@]}" $two --out "$out/$corpus-auto"
    uv run minigpt train "${data[@]}" $two $(shape 2 96 4 128 16) --out "$out/$corpus-2x96"
    uv run minigpt train "${data[@]}" $two $(shape 3 96 4 128 16) --out "$out/$corpus-3x96"
    uv run minigpt train "${data[@]}" $two $(shape 3 128 4 128 16) --out "$out/$corpus-3x128"
    uv run minigpt train "${data[@]}" $two $(shape 3 192 6 256 8) --out "$out/$corpus-3x192"
  done
fi
uv run python - "$out" <<'EOF'
import json, sys, yaml
from pathlib import Path
print("| run | shape | steps | whole-split loss | whole process, s |")
print("| --- | --- | --- | --- | --- |")
for run in sorted(Path(sys.argv[1]).iterdir()):
    if not (run / "results.json").exists():
        continue
    r = json.loads((run / "results.json").read_text())
    m = yaml.safe_load((run / "config.yaml").read_text())["model"]
    b = yaml.safe_load((run / "config.yaml").read_text())["train"]["batch_size"]
    shape = f"{m['n_layer']} x {m['n_embd']}, context {m['block_size']}, batch {b}"
    print(f"| {run.name} | {shape} | {r['steps']:,} | {r['val_loss_full']:.4f} | {r.get('wall_s', 0):.0f} |")
EOF
