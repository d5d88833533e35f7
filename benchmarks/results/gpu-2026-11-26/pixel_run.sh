# The 2026-11-26 device run (benchmarks/README.md, "Pixels on one H100"): on a lent GPU machine,
# after `source benchmarks/device/setup.sh`: `bash pixel_run.sh cuda 480` trains cartpole_swingup
# from pixels for 480 s, stops it with SIGTERM and copies its metrics to $OUT (the device tool's folder).
D=${1:-cuda}; T=${2:-480}
nvidia-smi -L 2>/dev/null; nproc
S=$(date +%s)
ez-robot train --task cartpole_swingup --obs pixels --budget 100k --device $D --no-replay-checkpoint --run-dir /tmp/px > $OUT/train.log 2>&1 & P=$!; sleep $T; kill -TERM $P; wait $P
echo "train rc $? after $(( $(date +%s) - S )) s"
cp /tmp/px/metrics.jsonl /tmp/px/config.yaml $OUT/; cp /tmp/px/checkpoints/latest.json $OUT/ 2>/dev/null
tr '\r' '\n' < $OUT/train.log | grep -v '^\s*$' | tail -25
python3 -c "
import json
r=[json.loads(l) for l in open('$OUT/metrics.jsonl')]
t0=r[0]['time']
for x in r:
    if x['kind']=='eval': print('eval', x['env_frames'], x['train_steps'], round(x['mean'],1), round(x['time']-t0))
tr=[x for x in r if x['kind']=='train']
if tr: print('train steps', tr[-1]['train_steps'], 'at', round(tr[-1]['time']-t0), 's; first at', round(tr[0]['time']-t0), 'frames', tr[-1]['env_frames'])
gaps=[(b['train_steps'], round(b['time']-a['time'],1)) for a,b in zip(tr,tr[1:]) if b['time']-a['time']>8]
print('gaps>8s', gaps)
"
