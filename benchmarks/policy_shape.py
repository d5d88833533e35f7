"""How wide is a sampled-mode policy, and where do its training searches put their weight?

    python benchmarks/policy_shape.py runs/cheetah_run
    python benchmarks/policy_shape.py runs/walker_walk --decisions 300

A gaussian or factorized policy is one peak per dimension.  Where the search's best
actions sit at both ends of a joint's range (bang-bang control), the policy target puts
weight on both signs and the policy can only cover them by widening; its widened
candidates then sit at the bounds too, and the search chooses among corners of the
action cube rather than around the policy's mode.  This plays the run's training search
(root noise, temperature 1, the run's simulations: what self-play runs) on its task for
``--decisions`` decisions and prints, on average over them:

- ``policy std``: the policy's pre-squash std (gaussian) or per-dimension entropy in nats
  (factorized, against log(bins) for a uniform one);
- ``|mode|``: the mean absolute value of the policy's most likely action;
- ``candidates at bound``: the share of the root candidates' components within 0.02 of -1 or 1;
- ``target at bound``: the improved policy's (the policy target's) mass on those components;
- ``minority sign``: per dimension, the target's mass on the sign it favours less (0: one
  sign, 0.5: an even split);
- ``push agreement``: the cosine between two independent searches' pushes from the same
  state, a push being the target-weighted mean candidate minus the policy's mode (1: the
  searches agree where the policy should move; 0: the targets are noise);
- ``target on policy draws``: the improved policy's mass on the root candidates drawn from
  the policy itself (the first ``search.root_policy_samples``; the others come from the
  widened proposal), and ``played from policy draws``: the share of searches whose chosen
  action is one of them.  Chance, a search that cannot tell its candidates apart under the
  uniform prior (``search.proposal_correction=false``), is printed beside them: the policy
  draws' share of the candidates.
"""
from __future__ import annotations

import argparse

import numpy as np

import ez_robot
from ez_robot.builders import env_spec
from ez_robot.errors import EzRobotError
from ez_robot.envs import make_from_config
from ez_robot.inference import run_search
from ez_robot.action_modes import factorized_log_probs, gaussian_params, mode_action

BOUND_TOLERANCE = 0.02


def at_bound(actions: np.ndarray) -> np.ndarray:
    """Components within BOUND_TOLERANCE of -1 or 1 (bool, the shape of ``actions``)."""
    return np.abs(actions) > 1.0 - BOUND_TOLERANCE


def minority_sign(weights: np.ndarray, candidates: np.ndarray) -> float:
    """Mean over dimensions of the weight on the sign each dimension favours less ([K], [K, D])."""
    positive = (weights[:, None] * (candidates > 0)).sum(0) / weights.sum()
    return float(np.minimum(positive, 1.0 - positive).mean())


def push(weights: np.ndarray, candidates: np.ndarray, mode: np.ndarray) -> np.ndarray:
    """The target-weighted mean candidate minus the policy's mode ([D])."""
    return (weights[:, None] * candidates).sum(0) / weights.sum() - mode


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two vectors (NaN when either is zero)."""
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norm) if norm > 0 else float("nan")


def policy_width(spec, params: np.ndarray) -> float:
    """Mean pre-squash std (gaussian) or mean per-dimension entropy in nats (factorized)."""
    if spec.mode == "gaussian":
        return float(gaussian_params(params, spec.dims)[1].mean())
    logp = factorized_log_probs(spec, np.asarray(params)[None])[0]  # [D, bins]
    return float(-(np.exp(logp) * logp).sum(-1).mean())


def policy_draw_shares(weights: np.ndarray, candidates: np.ndarray, played: np.ndarray,
                       policy_draws: int) -> tuple[float, float]:
    """The target's mass on the first ``policy_draws`` candidates ([K], [K, D]), and 1.0
    if the played action ([D]) is one of them, else 0.0."""
    chosen = int(np.argmin(np.abs(candidates - played[None]).sum(-1)))
    return float(weights[:policy_draws].sum() / weights.sum()), float(chosen < policy_draws)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory of a sampled action mode (gaussian or factorized)")
    parser.add_argument("--decisions", type=int, default=150, help="decisions played and measured")
    parser.add_argument("--seed", type=int, default=7, help="seed of the episode and of the searches")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint file (default: the latest)")
    args = parser.parse_args()
    if args.decisions < 1:
        parser.error("--decisions must be >= 1")

    try:
        agent = ez_robot.load(args.run, checkpoint=args.checkpoint)
    except EzRobotError as error:
        parser.error(str(error))
    spec = env_spec(agent.config).action
    if not spec.sampled:
        parser.error(f"{args.run} trained the joint action mode; this measures the sampled modes")

    search = agent._search.replace(add_noise=True, temperature=1.0)  # as self-play searches
    policy_draws = min(search.root_policy_samples, search.num_candidates)
    rng = np.random.default_rng(args.seed)
    env = make_from_config(agent.config.env, seed=args.seed, mode="train")
    obs, _ = env.reset(seed=args.seed)
    rows = []
    for _ in range(args.decisions):
        flat = np.asarray(obs, np.float32)[None]
        params = np.asarray(agent._inference.root(flat).policy_logits)
        mode = mode_action(spec, params)[0].astype(np.float64)
        pushes = []
        for _ in range(2):
            out = run_search(agent._inference, flat, search, rng)
            candidates = out.candidates[0].astype(np.float64)
            weights = np.asarray(out.policy[0], np.float64)
            pushes.append(push(weights, candidates, mode))
        bound = at_bound(candidates)
        on_policy_draws, played_policy_draw = policy_draw_shares(weights, candidates, out.actions[0], policy_draws)
        rows.append({
            "policy std" if spec.mode == "gaussian" else "policy entropy per dim": policy_width(spec, params[0]),
            "|mode|": float(np.abs(mode).mean()),
            "candidates at bound": float(bound.mean()),
            "target at bound": float((weights[:, None] * bound).sum(0).mean() / weights.sum()),
            "minority sign": minority_sign(weights, candidates),
            "push agreement": cosine(*pushes),
            "target on policy draws": on_policy_draws,
            "played from policy draws": played_policy_draw,
        })
        obs, _, terminated, truncated, _ = env.step(out.actions[0])
        if terminated or truncated:
            break
    env.close()
    prior = "corrected" if search.proposal_correction and policy_draws < len(candidates) else "uniform"
    print(f"{agent.task} ({spec.mode}, {spec.dims} dimensions), {len(rows)} decisions, "
          f"{search.num_simulations} simulations, {len(candidates)} candidates ({policy_draws} drawn from the policy, "
          f"chance {policy_draws / len(candidates):.2f}; prior {prior}):")
    print(", ".join(f"{k} {np.nanmean([r[k] for r in rows]):.2f}" for k in rows[0]))


if __name__ == "__main__":
    main()
