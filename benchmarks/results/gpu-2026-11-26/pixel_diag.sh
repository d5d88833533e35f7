# The 2026-11-26 diagnosis run: two short pixel runs (8, then 2 reanalyze workers) with a
# 50-step target period, so that target updates come within ~95 s; metrics to $OUT.
T=${1:-95}; D=${2:-cuda}
for R in 8 2; do
rm -rf /tmp/d$R
ez-robot train --task cartpole_swingup --obs pixels --budget 100k --device $D --no-replay-checkpoint --quiet --reanalyze-workers $R --set train.target_update_interval=50 --set replay.min_replay_size=500 --run-dir /tmp/d$R > $OUT/d$R.log 2>&1 & P=$!; sleep $T; kill -TERM $P; wait $P
cp /tmp/d$R/metrics.jsonl $OUT/m$R.jsonl
python3 -c "
import json
r=[json.loads(l) for l in open('$OUT/m$R.jsonl')]
t0=r[0]['time'] if r else 0; tr=[x for x in r if x['kind']=='train']
print('workers $R:', [(x['train_steps'], round(x['time']-t0,1), x['reanalyze_searches']) for x in tr])
"
done
