#!/usr/bin/env bash
# The GPU paths, run for real on a CUDA machine (the project's `device` tool lends one rarely).
#   bash scripts/gpu_check.sh recipe   # configs/shakespeare_char.yaml end to end: loss, tokens/s, MFU
#   bash scripts/gpu_check.sh paths    # fp16 + GradScaler, eager, nccl DDP, resume, sample/eval/score/attention
# Logs and results.json files go to $OUT (default ./gpu_check); checkpoints stay in a scratch folder.
# Needs data/tinyshakespeare.txt. Runs the package from the tree: PYTHONPATH=. python3 -m minigpt.
set -uo pipefail
OUT=${OUT:-gpu_check}
RUNS=${RUNS:-/tmp/minigpt_gpu_runs}
mkdir -p "$OUT" "$RUNS"
export PYTHONPATH=.
mg() { python3 -m minigpt "$@"; }
step() { echo; echo "=== $* ==="; }
keep() { cp "$RUNS/$1/results.json" "$OUT/$1.results.json" 2>/dev/null || echo "(no results.json for $1)"; }

step environment
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(), 'python', sys.version.split()[0])"

case "${1:-recipe}" in
recipe)
    step "shakespeare_char.yaml: bf16 autocast, torch.compile, fused AdamW, 5000 steps"
    mg train configs/shakespeare_char.yaml --out "$RUNS/recipe" log.progress=lines log.progress_seconds=15 \
        2>&1 | tee "$OUT/recipe.log"
    echo "train exit: ${PIPESTATUS[0]}"
    keep recipe
    step "eval on the whole val split"
    mg eval "$RUNS/recipe" 2>&1 | tee "$OUT/recipe_eval.log"
    ;;
paths)
    step "float16 autocast with GradScaler, compiled, 300 steps"
    mg train configs/shakespeare_char.yaml --out "$RUNS/fp16" train.dtype=float16 train.max_steps=300 \
        train.eval_interval=100 train.eval_steps=20 log.progress=lines 2>&1 | tee "$OUT/fp16.log"
    keep fp16
    step "float32, eager (train.compile=false), 200 steps"
    mg train configs/shakespeare_char.yaml --out "$RUNS/eager" train.dtype=float32 train.compile=false \
        train.max_steps=200 train.eval_interval=100 train.eval_steps=20 log.progress=lines 2>&1 | tee "$OUT/eager.log"
    keep eager
    step "resume the fp16 run to 400 steps"
    mg train --resume --out "$RUNS/fp16" train.max_steps=400 log.progress=lines 2>&1 | tee "$OUT/fp16_resume.log"
    keep fp16
    step "DDP through torchrun, nccl, 1 process (one GPU), 200 steps"
    mg train configs/shakespeare_char.yaml --out "$RUNS/ddp" --nproc 1 train.max_steps=200 train.eval_interval=100 \
        train.eval_steps=20 log.progress=lines 2>&1 | tee "$OUT/ddp.log"
    keep ddp
    step "sample, batched sample, eval, score, attention on cuda"
    mg sample "$RUNS/fp16" --prompt "ROMEO:" --max-new-tokens 200 2>&1 | tee "$OUT/sample.log"
    mg sample "$RUNS/fp16" -n 8 --max-new-tokens 100 --json 2>&1 | tail -2 | tee -a "$OUT/sample.log"
    mg eval "$RUNS/fp16" 2>&1 | tee "$OUT/eval.log"
    mg score "$RUNS/fp16" --text "ROMEO: But, soft! what light through yonder window breaks?" 2>&1 | tail -5 | tee "$OUT/score.log"
    mg attention "$RUNS/fp16" --text "ROMEO: But, soft!" --out "$OUT/attention.png" --html "$OUT/attention.html" 2>&1 | tee "$OUT/attention.log"
    ;;
*)
    echo "error: unknown part '$1' (use recipe or paths)" >&2
    exit 2
    ;;
esac
