"""Stable-Baselines3 SAC on DeepMind Control tasks, measured like ez-robot's runs.

The simplest strong baseline beside every learning claim (issue 95): SB3's SAC with its
defaults (``SAC("MlpPolicy", env, learning_starts=1000)``, one torch thread, CPU) on the
same task, the same env-step budget and the same action repeat as ez-robot's
``dmc_state`` preset, evaluated the same way: 10 deterministic episodes every 10k env
steps (env steps = simulator steps = agent steps x action repeat).  Observations are
dm_control's, flattened (through shimmy); an agent step repeats its action N times and
sums the N rewards, so an evaluation return is the usual 1000-simulator-step return.

Each finished run appends one row per evaluation to a CSV with the columns of the
project's results file (``benchmarks/results.csv``: task, setting, seed, env_steps,
eval_mean, eval_episodes, success_rate, evaluation, date, machine, source) plus
``cpu_minutes``: the run's process CPU time (user + sys, core-minutes, training and
evaluations) up to that evaluation; the last row of a run is its total.  Rows are written
when a run ends, so a stopped job loses at most the run in progress; ``--resume`` skips
the runs whose rows already reach the budget.  Setting: "sb3-sac default, action repeat N".

SB3 is a benchmark dependency, never ez-robot's: run this from its own virtual
environment, outside the repository::

    python3 -m venv /work/sb3-venv && /work/sb3-venv/bin/pip install torch==2.13.0 \\
        "stable-baselines3==2.9.*" "shimmy[dm-control]" mujoco==3.17.0 dm-control==1.0.50 \\
        "gymnasium>=1.0,<2" packaging

(torch==2.13.0 resolves to the CPU wheel where the index offers one; ``packaging`` is
imported by gymnasium's MuJoCo renderer, which shimmy loads, and may be missing.)  Then::

    /work/sb3-venv/bin/python benchmarks/peers/sac.py --task cheetah_run --env-steps 100k \\
        --seeds 0 1 2 [--action-repeat N] [--out benchmarks/peers/sac_results.csv] [--resume]

``--export-peers benchmarks/peers.csv`` (no training, any python) then writes the rows of
``--out`` into the peers file as system "SB3 SAC", replacing the rows an earlier export
wrote there, so that ``ez-robot report`` draws SAC's curves beside ours and puts its
100k mean in the summary table.

Without ``--action-repeat`` the action repeat is the one ``configs/dmc_state.yaml`` gives
the task (cartpole 8, finger 2, walker 2, the others 4).  CPU time, not wall time, is the
cost to compare: SAC's results do not depend on the machine's load, its wall time does.
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import math
import os
import platform
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")     # no display; nothing is rendered
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "dmc_state.yaml"
DEFAULT_OUT = ROOT / "benchmarks" / "peers" / "sac_results.csv"
COLUMNS = ("task", "setting", "seed", "env_steps", "eval_mean", "eval_episodes", "success_rate",
           "evaluation", "date", "machine", "source", "cpu_minutes")
EVAL_EVERY = 10_000          # env steps
EVAL_EPISODES = 10
INSTALL = ('pip install torch==2.13.0 "stable-baselines3==2.9.*" "shimmy[dm-control]" '
           'mujoco==3.17.0 dm-control==1.0.50 "gymnasium>=1.0,<2" packaging')


def env_steps_arg(text: str) -> int:
    """100000, 100k, 1M, 1.5M."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a step count: {text!r} (e.g. 100000, 100k, 1M)")
    scale = {"": 1, "k": 1_000, "m": 1_000_000}[match.group(2).lower()]
    return int(round(float(match.group(1)) * scale))


def preset_action_repeat(task: str, path: Path = PRESET) -> int:
    """The action repeat configs/dmc_state.yaml gives ``task``: the first ``tasks:`` pattern
    that matches it and sets ``action_repeat``, else the preset's ``env.action_repeat``.
    Read with a few patterns, since this venv has no yaml and the file's layout is fixed."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        sys.exit(f"error: cannot read {path} for the task's action repeat; pass --action-repeat N")
    default, section, patterns, current = None, None, [], None
    for line in lines:
        code = line.split("#", 1)[0].rstrip()
        if not code.strip():
            continue
        top = re.match(r"^(\w+):", code)
        if top:
            section, current = top.group(1), None
            continue
        repeat = re.search(r"\baction_repeat:\s*(\d+)", code)
        if section == "env" and repeat and default is None:
            default = int(repeat.group(1))
        elif section == "tasks":
            entry = re.match(r"^\s{1,4}\"?([^\"\s:]+)\"?:", code)
            if entry and not code.startswith(" " * 4):
                current = entry.group(1)
                patterns.append([current, None])
            if repeat and current is not None and patterns[-1][1] is None:
                patterns[-1][1] = int(repeat.group(1))
    for pattern, value in patterns:
        if value is not None and fnmatch.fnmatchcase(task, pattern):
            return value
    if default is None:
        sys.exit(f"error: {path} gives no env.action_repeat; pass --action-repeat N")
    return default


def split_task(task: str) -> tuple[str, str]:
    """cartpole_swingup -> (cartpole, swingup); ball_in_cup_catch -> (ball_in_cup, catch)."""
    from dm_control import suite
    for domain, name in suite.ALL_TASKS:
        if f"{domain}_{name}" == task:
            return domain, name
    known = ", ".join(sorted(f"{d}_{n}" for d, n in suite.ALL_TASKS))
    sys.exit(f"error: unknown dm_control task {task!r}; known: {known}")


def make_env(task: str, action_repeat: int):
    """shimmy's dm_control env, observations flattened, actions repeated (rewards summed)."""
    import gymnasium as gym
    import shimmy  # noqa: F401  (registers the dm_control/* ids)
    from gymnasium.wrappers import FlattenObservation
    from stable_baselines3.common.monitor import Monitor

    class ActionRepeat(gym.Wrapper):
        def __init__(self, env, repeat: int):
            super().__init__(env)
            self.repeat = repeat

        def step(self, action):
            total = 0.0
            for _ in range(self.repeat):
                obs, reward, terminated, truncated, info = self.env.step(action)
                total += float(reward)
                if terminated or truncated:
                    break
            return obs, total, terminated, truncated, info

    domain, name = split_task(task)
    env = gym.make(f"dm_control/{domain}-{name}-v0", disable_env_checker=True)
    env = FlattenObservation(env)
    env = gym.wrappers.TransformObservation(
        env, lambda o: o.astype("float32"),
        gym.spaces.Box(-float("inf"), float("inf"), env.observation_space.shape, "float32"))
    return Monitor(ActionRepeat(env, action_repeat))


def done_runs(path: Path, setting: str, task: str, env_steps: int) -> set[int]:
    """Seeds of ``task``/``setting`` whose rows in ``path`` reach ``env_steps``."""
    if not path.exists():
        return set()
    with open(path, newline="") as f:
        return {int(row["seed"]) for row in csv.DictReader(f)
                if row.get("task") == task and row.get("setting") == setting
                and row.get("evaluation", "training") == "training"
                and int(row.get("env_steps") or 0) >= env_steps}


def append_rows(path: Path, rows: list[dict]) -> None:
    """Append under the file's own header (a results file without ``cpu_minutes`` keeps
    its columns; the summary line then carries the CPU time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(COLUMNS)
    if path.exists() and path.stat().st_size:
        with open(path, newline="") as f:
            columns = next(csv.reader(f))
    new = not path.exists() or not path.stat().st_size
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(rows)
        f.flush()
        os.fsync(f.fileno())


PEER_COLUMNS = ("system", "task", "setting", "seed", "env_steps", "score", "score_std", "seeds", "eval_episodes",
                "date", "machine", "source", "note")
PEER_SYSTEM, PEER_SOURCE = "SB3 SAC", "benchmarks/peers/sac.py"


def export_peers(results: Path, peers: Path) -> int:
    """Rewrites ``peers``' rows from this script (system and source as above) from
    ``results``' rows; the other rows stay as they are, in their order.  Returns how many
    rows it wrote."""
    if not results.exists():
        sys.exit(f"error: {results} does not exist: run the script first (see --help)")
    with open(results, newline="") as f:
        ours = list(csv.DictReader(f))
    def run(row: dict) -> tuple:
        return row["task"], row["setting"], row["seed"]

    last: dict[tuple, dict] = {}  # each run's last row, which carries its total CPU time
    for row in ours:
        if run(row) not in last or int(row["env_steps"]) >= int(last[run(row)]["env_steps"]):
            last[run(row)] = row
    kept = []
    if peers.exists():
        with open(peers, newline="") as f:
            reader = csv.DictReader(f)
            if tuple(reader.fieldnames or ()) != PEER_COLUMNS:
                sys.exit(f"error: {peers} is not a peers file (columns {', '.join(PEER_COLUMNS)})")
            kept = [row for row in reader if not (row["system"] == PEER_SYSTEM and row["source"] == PEER_SOURCE)]
    new = [{"system": PEER_SYSTEM, "task": row["task"], "setting": row["setting"], "seed": row["seed"],
            "env_steps": row["env_steps"], "score": row["eval_mean"], "eval_episodes": row["eval_episodes"],
            "date": row["date"], "machine": row["machine"], "source": PEER_SOURCE,
            "note": f"{float(row['cpu_minutes']):.1f} CPU min" if last[run(row)] is row else ""}
           for row in ours]
    with open(peers, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=PEER_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(kept + new)
    return len(new)


def train_one(task: str, seed: int, env_steps: int, action_repeat: int, setting: str) -> list[dict]:
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    env = DummyVecEnv([lambda: make_env(task, action_repeat)])
    eval_env = DummyVecEnv([lambda: make_env(task, action_repeat)])
    eval_env.seed(seed + 10_000)            # its own episodes, fixed by the seed
    model = SAC("MlpPolicy", env, learning_starts=1000, seed=seed, verbose=0, device="cpu")
    date, machine = time.strftime("%Y-%m-%d"), f"{os.cpu_count()}-core {platform.machine()} CPU"
    rows, eval_cpu = [], [0.0]

    class Evaluate(BaseCallback):
        next_eval = EVAL_EVERY

        def _on_step(self) -> bool:
            steps = self.num_timesteps * action_repeat
            if steps >= self.next_eval or steps >= env_steps:
                start = time.process_time()
                returns, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=EVAL_EPISODES,
                                             deterministic=True, return_episode_rewards=True)
                eval_cpu[0] += time.process_time() - start
                mean = sum(returns) / len(returns)
                cpu = (time.process_time() - cpu0) / 60
                rows.append({"task": task, "setting": setting, "seed": seed, "env_steps": steps,
                             "eval_mean": f"{mean:.1f}", "eval_episodes": len(returns), "success_rate": "",
                             "evaluation": "training", "date": date, "machine": machine,
                             "source": f"benchmarks/peers/sac.py {task}-ar{action_repeat}-s{seed}",
                             "cpu_minutes": f"{cpu:.2f}"})
                print(f"  {task} seed {seed}: {steps:>7} env steps  eval {mean:7.1f} "
                      f"[{min(returns):.0f}, {max(returns):.0f}]  cpu {cpu:6.2f} min  "
                      f"wall {(time.perf_counter() - wall0) / 60:6.2f} min", flush=True)
                while self.next_eval <= steps:
                    self.next_eval += EVAL_EVERY
            return True

    model.learn(total_timesteps=math.ceil(env_steps / action_repeat), callback=Evaluate())
    cpu, wall = (time.process_time() - cpu0) / 60, (time.perf_counter() - wall0) / 60
    print(f"done {task} seed {seed} action repeat {action_repeat}: final {rows[-1]['eval_mean']} at "
          f"{rows[-1]['env_steps']} env steps; cpu_minutes {cpu:.2f} (evaluations {eval_cpu[0] / 60:.2f}), "
          f"wall {wall:.2f} min", flush=True)
    env.close()
    eval_env.close()
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", help="dm_control task, e.g. cheetah_run, ball_in_cup_catch")
    parser.add_argument("--env-steps", type=env_steps_arg, default=100_000,
                        help="simulator steps (agent steps x action repeat); 100k, 1M (default 100k)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--action-repeat", type=int, default=None,
                        help="default: the task's value in configs/dmc_state.yaml")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"CSV to append to (default {DEFAULT_OUT})")
    parser.add_argument("--resume", action="store_true",
                        help="skip seeds whose rows in --out already reach --env-steps")
    parser.add_argument("--export-peers", type=Path, default=None, metavar="PEERS_CSV",
                        help="no training: write --out's rows into this peers file as system 'SB3 SAC'")
    args = parser.parse_args(argv)
    if args.export_peers is not None:
        count = export_peers(args.out, args.export_peers)
        print(f"{count} SB3 SAC rows from {args.out} -> {args.export_peers}")
        return 0
    if not args.task:
        parser.error("--task is required (or --export-peers)")

    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        sys.exit("error: stable_baselines3 is not installed. SB3 is an optional benchmark dependency, "
                 "not ez-robot's: make a separate venv outside the repository and run this script "
                 f"with its python:\n  python3 -m venv /work/sb3-venv && /work/sb3-venv/bin/{INSTALL}")
    try:
        import shimmy  # noqa: F401
        import dm_control  # noqa: F401
    except ImportError as error:
        sys.exit(f"error: {error.name} is not installed (dm_control tasks come through shimmy): {INSTALL}")

    repeat = args.action_repeat or preset_action_repeat(args.task)
    if repeat < 1:
        parser.error("--action-repeat must be >= 1")
    setting = f"sb3-sac default, action repeat {repeat}"
    skip = done_runs(args.out, setting, args.task, args.env_steps) if args.resume else set()
    print(f"SB3 SAC {stable_baselines3.__version__}: {args.task}, {args.env_steps} env steps, "
          f"action repeat {repeat}, seeds {args.seeds} -> {args.out}", flush=True)
    for seed in args.seeds:
        if seed in skip:
            print(f"skip {args.task} seed {seed}: already in {args.out}", flush=True)
            continue
        append_rows(args.out, train_one(args.task, seed, args.env_steps, repeat, setting))
    return 0


if __name__ == "__main__":
    sys.exit(main())
