#!/bin/bash
# A timed piece of a real run on a lent GPU machine, to check its training speed past the
# target network's updates (a benchmark session ends before most of them).  From the
# repository root, after `source benchmarks/device/setup.sh`:
#
#   bash benchmarks/device/train_check.sh SECONDS [ez-robot train options...]
#   e.g. bash benchmarks/device/train_check.sh 480 --task cartpole_swingup --obs pixels --budget 100k
#
# Trains with `--device cuda` (or $DEVICE) and `--no-replay-checkpoint`, stops the run with SIGTERM after
# SECONDS, copies its metrics and log to $OUT (the device tool's folder, or ./check-out),
# and prints each training record: seconds since the start, training steps, and the roots
# the learner searched itself (about 0 with buffer reanalyze once the sweep keeps up).
set -u
seconds=${1:?usage: train_check.sh SECONDS [ez-robot train options...]}; shift
out=${OUT:-check-out}; mkdir -p "$out"; run=$(mktemp -d)/run
nvidia-smi -L 2>/dev/null
ez-robot train "$@" --device "${DEVICE:-cuda}" --no-replay-checkpoint --quiet --run-dir "$run" > "$out/train.log" 2>&1 &
pid=$!
sleep "$seconds"; kill -TERM "$pid" 2>/dev/null; wait "$pid"
cp "$run/metrics.jsonl" "$run/config.yaml" "$out/" 2>/dev/null
tail -3 "$out/train.log"
python3 - "$out/metrics.jsonl" <<'PY'
import json, os, sys
records = [json.loads(line) for line in open(sys.argv[1])] if os.path.exists(sys.argv[1]) else []
start = records[0]["time"] if records else 0.0
for r in records:
    if r["kind"] == "eval":
        print(f"eval  {r['time'] - start:7.1f} s  env frames {r['env_frames']:>7}  return {r['mean']:.1f}")
    elif r["kind"] == "train":
        print(f"train {r['time'] - start:7.1f} s  steps {r['train_steps']:>6}  learner searches "
              f"{r.get('reanalyze_searches', 0):>5}  stored {r.get('reanalyze_stored', 0):>5}")
PY
