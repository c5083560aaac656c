#!/usr/bin/env bash
# The four-minute CPU recipe's candidates, trained on a GPU at the step counts a CPU fits in its
# budget: the loss a recipe reaches after N steps does not depend on the machine, so a lent GPU
# answers in minutes what the CPU would take hours to (docs/lab/benchmarks.md, "the GPU grid").
#   bash scripts/gpu_recipe_grid.sh GRID_FILE [PARALLEL]
# GRID_FILE: one run a line, "NAME STEPS KEY=VALUE ...", over configs/cpu_4min.yaml with the
# schedule run over STEPS instead of the clock; '#' lines are skipped. Each run's results.json goes
# to $OUT/NAME.json (default OUT=./grid) and a line "NAME steps loss" to $OUT/grid.txt.
# Needs data/tinyshakespeare.txt and a CUDA GPU. Runs the package from the tree (PY: python3).
set -uo pipefail
GRID=${1:?usage: scripts/gpu_recipe_grid.sh GRID_FILE [PARALLEL]}
PARALLEL=${2:-16}
PY=${PY:-python3}
OUT=${OUT:-grid}
RUNS=${RUNS:-/tmp/minigpt_grid_runs}
mkdir -p "$OUT" "$RUNS"
export PYTHONPATH=. OUT RUNS PY
one() {
    local name=$1 steps=$2
    shift 2
    "$PY" -m minigpt train configs/cpu_4min.yaml --out "$RUNS/$name" --data data/tinyshakespeare.txt \
        train.device=cuda train.max_time=null optim.schedule_by=steps "train.max_steps=$steps" \
        log.progress=off log.tensorboard=false log.head_scores=false log.embeddings=false log.hparams=false \
        "$@" >"$RUNS/$name.log" 2>&1
    cp "$RUNS/$name/results.json" "$OUT/$name.json" 2>/dev/null
    local loss
    loss=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['val_loss_full'])" "$OUT/$name.json" 2>/dev/null ||
        tail -1 "$RUNS/$name.log")
    echo "$name $steps $loss" | tee -a "$OUT/grid.txt"
}
export -f one
grep -v '^\s*#' "$GRID" | grep -v '^\s*$' | xargs -P "$PARALLEL" -L 1 bash -c 'one "$@"' _
