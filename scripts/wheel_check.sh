#!/usr/bin/env bash
# minigpt as a user installs it: build the wheel, install it into a clean virtual environment (no
# dev group; then with the export extra) and as a uv tool from the checkout, and run every command
# from an empty folder with no network. Each must exit 0 with no traceback. `.ci/run` calls it.
# Versions come from uv.lock: the packages `uv run pytest` synced come from uv's cache, not the network.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
export UV_CACHE_DIR="${UV_CACHE_DIR:-$(uv cache dir)}"  # kept when HOME moves below
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
uv build -q --out-dir "$work/dist"
wheel=$(ls "$work"/dist/*.whl)
echo "wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB"
uv export -q --frozen --no-dev --no-emit-project --no-hashes --extra export -o "$work/pins.txt"
uv venv -q --python "$repo/.venv/bin/python" "$work/venv"
install() { uv pip install -q --python "$work/venv/bin/python" -c "$work/pins.txt" "$@"; }
install "$wheel"

offline=()
if unshare -rn true 2>/dev/null; then offline=(unshare -rn); else echo "(unshare unavailable: the network stays up)"; fi
mkdir "$work/empty" "$work/home"
export HOME="$work/home" XDG_CACHE_HOME="$work/home/.cache" PATH="$work/venv/bin:$PATH"
cd "$work/empty"
printf 'To be, or not to be, that is the question:\nWhether tis nobler in the mind to suffer\n%.0s' {1..60} >own.txt
run() {  # a command, offline; its output is shown only when it fails
  local t0=$SECONDS
  if ! "${offline[@]}" "$@" >"$work/log" 2>&1 || grep -q "Traceback" "$work/log"; then
    cat "$work/log"
    echo "FAILED: $*" >&2
    exit 1
  fi
  echo "ok $((SECONDS - t0))s: $*"
}
tiny=(model.n_layer=2 model.n_head=2 model.n_embd=32 model.block_size=32 train.batch_size=8 train.eval_interval=10
  train.eval_steps=2 train.device=cpu log.sample_length=20 log.attention_probe=)

run minigpt --version
run python -m minigpt --version
run minigpt train "${tiny[@]}" train.max_steps=20
run minigpt train --data own.txt --out runs/own "${tiny[@]}" train.max_steps=20
run minigpt sample runs/default --max-new-tokens 40
run minigpt eval runs/default
run minigpt score runs/own --text "To be, or not"
run minigpt attention runs/default --text "ROMEO: But, soft" --html attention.html
run minigpt heads runs/default
run minigpt lens runs/default --text "ROMEO: But, soft"
run minigpt sweep --data own.txt --out runs/sweep "${tiny[@]}" train.max_steps=5 optim.lr=1e-3,3e-3
run minigpt runs
run minigpt runs runs/sweep
run minigpt playground runs/default playground.html
run minigpt lessons my_lessons
run python -c "
import minigpt
run = minigpt.train('cpu_4min', '${tiny[*]} train.max_steps=5'.split(), data='own.txt', out='runs/python')
print(minigpt.load(run.path).sample('To be', max_new_tokens=20), run.model.heads(ablation='none'))"
if "${offline[@]}" minigpt export runs/default hf >"$work/log" 2>&1 || grep -q Traceback "$work/log" ||
  ! grep -q "^error: .*minigpt\[export\]" "$work/log"; then  # without the extra: one line that names it
  cat "$work/log" && echo "FAILED: minigpt export without the extra" >&2 && exit 1
fi
echo "ok: export without the extra names it"

install "$wheel[export]"
run minigpt export runs/default hf
run minigpt export runs/default onnx --format onnx

UV_TOOL_DIR="$work/tools" UV_TOOL_BIN_DIR="$work/bin" uv tool install -q -c "$work/pins.txt" "$repo"
rm -rf runs
run "$work/bin/minigpt" train "${tiny[@]}" train.max_steps=20
run "$work/bin/minigpt" sample runs/default --max-new-tokens 40
echo "wheel check passed in ${SECONDS}s"
