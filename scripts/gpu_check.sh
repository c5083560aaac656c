#!/usr/bin/env bash
# The GPU paths, run for real on a CUDA machine (the project's `device` tool lends one rarely).
#   bash scripts/gpu_check.sh recipe     # configs/shakespeare_char.yaml end to end: loss, tokens/s, MFU
#   bash scripts/gpu_check.sh paths      # fp16 + GradScaler, eager, nccl DDP, resume, sample/eval/score/attention
#   bash scripts/gpu_check.sh features   # round four: head scores, eval --by-position, heads ablation,
#                                        # a sweep whose second point is larger, --auto for one minute
#   bash scripts/gpu_check.sh ranks      # the memory preflight's estimate against a real step's peak
#                                        # (max_memory_allocated), and --nproc 2 on one GPU: rank 1's error line
# Logs and results.json files go to $OUT (default ./gpu_check); checkpoints stay in a scratch folder.
# `features` prints each step's wall time and the GPU's peak memory (nvidia-smi, sampled) and
# collects those lines in $OUT/summary.txt.
# Needs data/tinyshakespeare.txt. Runs the package from the tree: PYTHONPATH=. $PY -m minigpt (PY: python3).
set -uo pipefail
PART=${1:-recipe}
case "$PART" in
recipe | paths | features | ranks) ;;
*)
    echo "error: unknown part '$PART' (use recipe, paths, features or ranks)" >&2
    exit 2
    ;;
esac
PY=${PY:-python3}
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "error: no CUDA GPU for $PY here (torch.cuda.is_available() is false); run scripts/gpu_check.sh on a GPU machine" >&2
    exit 2
fi
OUT=${OUT:-gpu_check}
RUNS=${RUNS:-/tmp/minigpt_gpu_runs}
mkdir -p "$OUT" "$RUNS"
export PYTHONPATH=.
mg() { "$PY" -m minigpt "$@"; }
step() { echo; echo "=== $* ==="; }
keep() { cp "$RUNS/$1/results.json" "$OUT/$1.results.json" 2>/dev/null || echo "(no results.json for $1)"; }
# measured NAME COMMAND...: COMMAND's output to $OUT/NAME.log (its last lines shown), then one line
# with its exit code, wall time and the GPU's peak memory while it ran
measured() {
    local name=$1
    shift
    step "$name: $*"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$RUNS/$name.mem" 2>/dev/null &
    local poll=$! t0 t1 rc peak
    t0=$(date +%s.%N)
    "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    kill "$poll" 2>/dev/null
    wait "$poll" 2>/dev/null
    tail -n "${SHOW:-6}" "$OUT/$name.log"
    peak=$(sort -n "$RUNS/$name.mem" | tail -1)
    awk -v n="$name" -v rc="$rc" -v t0="$t0" -v t1="$t1" -v p="${peak:-?}" \
        'BEGIN { printf "%-22s exit %-3d %8.1f s   peak GPU memory %s MiB\n", n, rc, t1 - t0, p }' | tee -a "$OUT/summary.txt"
}

step environment
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
"$PY" -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(), 'python', sys.version.split()[0])"

case "$PART" in
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
features)
    DATA=data/tinyshakespeare.txt
    : >"$OUT/summary.txt"
    # the default config, whose log.head_scores and log.tensorboard are on: head scores at every eval
    measured default mg train --data "$DATA" --out "$RUNS/default" train.keep_every=120 log.progress=lines
    keep default
    measured by_position mg eval "$RUNS/default" --by-position --png "$OUT/by_position.png"
    SHOW=20 measured heads_ablation mg heads "$RUNS/default" --exact 4 --no-color # 4 exact, the rest estimated
    SHOW=12 measured heads_over_training mg heads "$RUNS/default" --over-training --no-color
    # two points in one process, the second larger: batches sized from this GPU's memory so that the
    # first leaves about half of it in PyTorch's cache and the second needs about three quarters
    read -r B1 B2 < <("$PY" - <<'PYEOF'
import torch
from minigpt.config.files import load_config
from minigpt.model import parameter_count
from minigpt.training.preflight import estimate
cfg = load_config("configs/shakespeare_char.yaml", [])
est = estimate(cfg, 65, parameter_count(cfg.model, 65), torch.bfloat16, "cuda")
total = torch.cuda.mem_get_info()[1]
print(*(max(8, int((share * total - est.fixed) / est.per_sequence) // 8 * 8) for share in (0.5, 0.75)))
PYEOF
    )
    echo "sweep batches: $B1 then $B2"
    SHOW=8 measured sweep mg sweep configs/shakespeare_char.yaml "train.batch_size=$B1,$B2" train.max_steps=20 \
        train.eval_interval=20 train.eval_steps=2 train.final_eval_tokens=100000 train.compile=false \
        log.progress=lines --out "$RUNS/sweep"
    SHOW=12 measured auto mg train --data "$DATA" --auto train.max_time=1m --out "$RUNS/auto" log.progress=lines
    keep auto
    grep -h "plan:\|done:\|stopped at" "$OUT/auto.log"
    step "summary"
    cat "$OUT/summary.txt"
    ;;
ranks)
    DATA=data/tinyshakespeare.txt
    step "the preflight's estimate against a real step: 12 x 12 heads, context 1024, dropout 0.1, micro-batch 16"
    "$PY" - <<'PYEOF' | tee "$OUT/preflight.log"
import torch
from minigpt.config.files import load_config
from minigpt.model import GPT, parameter_count
from minigpt.training.optim import build_optimizer
from minigpt.training.preflight import estimate

keys = ["model.n_layer=12", "model.n_head=12", "model.n_embd=768", "model.block_size=1024", "model.dropout=0.1"]
cfg = load_config(None, [*keys, "train.batch_size=16"])
device = torch.device("cuda", 0)
torch.cuda.set_device(device)
model = GPT(cfg.model, 65).to(device)
optimizer = build_optimizer(model, cfg, device, torch.bfloat16)
x = torch.randint(65, (16, 1024), device=device)
for _ in range(2):  # the second step holds the optimizer's state too
    with torch.autocast("cuda", torch.bfloat16):
        _, loss = model(x, x)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
torch.cuda.synchronize(device)
need = estimate(cfg, 65, parameter_count(cfg.model, 65), torch.bfloat16, "cuda").total(16)
peak = torch.cuda.max_memory_allocated(device)
print(f"preflight {need / 2**30:.2f} GB, max_memory_allocated {peak / 2**30:.2f} GB, estimate / peak {need / peak:.2f}")
PYEOF
    step "--nproc 2 on one GPU: rank 1 has none of its own, and its line must reach the terminal"
    mg train --nproc 2 --device cuda --data "$DATA" --out "$RUNS/two_on_one" train.max_steps=5 2>"$OUT/two_on_one.log"
    rc=$?
    grep "^error: " "$OUT/two_on_one.log"
    echo "exit $rc (expected: 2, and one line 'error: rank 1: LOCAL_RANK 1 but only 1 CUDA device(s): ...')"
    ;;
esac
