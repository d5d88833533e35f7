"""Does the learned model rank a decision's actions as the simulator does?

    python benchmarks/q_ranking.py runs/cheetah_run --states 12
    python benchmarks/q_ranking.py runs/cheetah_run --horizon 200 --set search.num_simulations=128

The search improves on the policy only as far as its Q values order the root's actions
correctly.  This plays the run's policy head greedily (its most likely action, no search)
on the task and, at every ``--every``-th decision from decision 30 on, copies the physics
and scores each root candidate of one evaluation search (the joint mode: every joint
action) four ways:

- ``simulator``: the candidate played for one decision, then the greedy policy head (or,
  ``--continuation search``, the greedy search) for ``--horizon`` decisions, dm_control's
  rewards discounted with the run's discount, and the model's value of the last
  observation (discount^(horizon + 1) of the total);
- ``search``: the search's completed Q of the candidate (sampled modes; the joint mode's
  unvisited actions have none, so this row is left out there);
- ``one step``: the model's reward and discounted value one recurrent step from the root;
- ``true next obs``: the simulator's reward of the one decision plus the discounted value
  the model gives the observation it leads to (the value head alone, without the dynamics).

It prints, per state and on average, each score's Spearman rank correlation with the
simulator's, how much simulator Q the search's choice and the one-step argmax gain over the
policy's own action, and the best any candidate gains.  A correlation near 0 with a best
gain well above 0 means better actions were on offer and the model could not tell them apart.
"""
from __future__ import annotations

import argparse

import numpy as np

import ez_robot
from ez_robot.builders import env_spec
from ez_robot.errors import EzRobotError
from ez_robot.inference import run_search
from ez_robot.action_modes import mode_action
from ez_robot.envs.dmc import dmc_tasks
from ez_robot.envs.dmc import DMControlEnv

FIRST_DECISION = 30  # past the start-up transient of every DMC task measured


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 of x, ties averaged."""
    order = np.argsort(x, kind="stable")
    out = np.empty(len(x))
    out[order] = np.arange(len(x))
    for value in np.unique(x):
        tied = x == value
        if tied.sum() > 1:
            out[tied] = out[tied].mean()
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (NaN when either side is constant)."""
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


class Probe:
    """The run's networks and the simulator, for scoring candidate actions from one state."""

    def __init__(self, agent, env: DMControlEnv, spec, continuation: str = "policy"):
        self.agent, self.env, self.spec = agent, env, spec
        self.discount = float(agent._search.discount)
        self.continuation = continuation  # after the candidate: "policy" (its mode) or "search"
        self.dm_env = env._env

    def env_action(self, action) -> np.ndarray:
        """The env's action vector for a network action (a joint index or a [-1, 1] vector)."""
        if self.agent._actions is None:
            return np.asarray(action, np.float64)
        return np.asarray(self.agent._actions.action(action), np.float64)

    def greedy(self, obs: np.ndarray):
        """(the policy head's most likely action, the model's value) for one observation."""
        root = self.agent._inference.root(np.asarray(obs, np.float32)[None])
        if self.spec.sampled:
            action = mode_action(self.spec, root.policy_logits)[0]
        else:
            action = int(np.argmax(root.policy_logits[0]))
        return action, float(root.value[0])

    def searched(self, obs: np.ndarray):
        """The greedy search's action for one observation (as ``ez-robot eval`` plays)."""
        out = run_search(self.agent._inference, np.asarray(obs, np.float32)[None], self.agent._search,
                         self.agent._rng)
        return out.actions[0] if self.spec.sampled else int(out.actions[0])

    def one_step(self, obs: np.ndarray, candidates) -> np.ndarray:
        """The model's reward + discount x value one recurrent step from the root, per candidate."""
        count = len(candidates)
        root = self.agent._inference.root(np.repeat(np.asarray(obs, np.float32)[None], count, axis=0))
        actions = np.asarray(candidates, np.float32) if self.spec.sampled else np.asarray(candidates, np.int32)
        _, reward, value, _ = self.agent._inference.recurrent_fn(root.hidden, actions, np.ones(count, bool))
        return np.asarray(reward, np.float64) + self.discount * np.asarray(value, np.float64)

    def _decision(self, action) -> tuple[float, np.ndarray]:
        """One decision in the physics (action_repeat steps): (reward, next observation)."""
        physics, task = self.dm_env.physics, self.dm_env.task
        vector = self.env_action(action)
        reward = 0.0
        for _ in range(self.env.action_repeat):
            task.before_step(vector, physics)
            physics.step(self.dm_env._n_sub_steps)
            task.after_step(physics)
            reward += task.get_reward(physics)
        observation = task.get_observation(physics)
        return reward, np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in observation.values()])

    def _restore(self, state: tuple[np.ndarray, float]) -> None:
        """Put the physics back to ``state`` (state vector, time)."""
        physics = self.dm_env.physics
        with physics.reset_context():
            physics.set_state(state[0])
            physics.data.time = state[1]

    def simulate(self, state: tuple[np.ndarray, float], first, horizon: int) -> tuple[float, float]:
        """(simulator Q, true-next-observation Q) of ``first`` from the physics ``state`` (state vector, time)."""
        self._restore(state)
        reward, obs = self._decision(first)
        next_value = self.greedy(obs)[1]
        observed = reward + self.discount * next_value
        total, weight = reward, self.discount
        for _ in range(horizon):
            action = self.greedy(obs)[0] if self.continuation == "policy" else self.searched(obs)
            reward, obs = self._decision(action)
            total += weight * reward
            weight *= self.discount
        total += weight * self.greedy(obs)[1]
        self._restore(state)
        return total, observed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory of a dm_control task")
    parser.add_argument("--states", type=int, default=12, help="states measured")
    parser.add_argument("--every", type=int, default=20, help="decisions between two measured states")
    parser.add_argument("--horizon", type=int, default=100, help="decisions played after a candidate")
    parser.add_argument("--continuation", choices=["policy", "search"], default="policy",
                        help="what plays after a candidate: the policy's most likely action, or the greedy search")
    parser.add_argument("--seed", type=int, default=7, help="seed of the episode")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint file (default: the latest)")
    parser.add_argument("--set", action="append", default=[], metavar="search.KEY=VALUE",
                        help="a search setting for the measured searches, e.g. search.num_simulations=128")
    args = parser.parse_args()

    try:
        agent = ez_robot.load(args.run, checkpoint=args.checkpoint, search_overrides=args.set)
    except EzRobotError as error:
        parser.error(str(error))
    names = dmc_tasks()
    if agent.task not in names or agent.config.env.obs != "state":
        parser.error(f"{args.run} trained {agent.task} from {agent.config.env.obs}; this measures dm_control "
                     "tasks from states")
    search = agent._search
    domain, task = names[agent.task]
    env = DMControlEnv(domain, task, seed=args.seed, action_repeat=agent.config.env.action_repeat)
    probe = Probe(agent, env, env_spec(agent.config).action, args.continuation)
    obs, _ = env.reset(seed=args.seed)
    rows, decision, done = [], 0, False
    while not done and len(rows) < args.states:
        if decision >= FIRST_DECISION and decision % args.every == 0:
            physics = env._env.physics
            state = (physics.get_state().copy(), float(physics.data.time))  # get_state leaves out the time
            out = run_search(agent._inference, np.asarray(obs, np.float32)[None], search, agent._rng)
            own, _ = probe.greedy(obs)
            if probe.spec.sampled:
                candidates = list(out.candidates[0])
                chosen = int(np.argmin(np.abs(out.candidates[0] - out.actions[0]).sum(-1)))
                own_index = int(np.argmin(np.abs(out.candidates[0] - own).sum(-1)))
                search_q = np.asarray(out.root_q_values[0], np.float64)
            else:
                candidates = list(range(probe.spec.num_actions))
                chosen, own_index, search_q = int(out.actions[0]), int(own), None
            scored = [probe.simulate(state, c, args.horizon) for c in candidates]
            true_q = np.array([s[0] for s in scored])
            observed_q = np.array([s[1] for s in scored])
            model_q = probe.one_step(obs, candidates)
            row = {
                "search": spearman(search_q, true_q) if search_q is not None else float("nan"),
                "one step": spearman(model_q, true_q),
                "true next obs": spearman(observed_q, true_q),
                "search gain": true_q[chosen] - true_q[own_index],
                "one-step gain": true_q[int(np.argmax(model_q))] - true_q[own_index],
                "best gain": true_q.max() - true_q[own_index],
                "simulator std": true_q.std(),
                "one-step std": model_q.std(),
            }
            rows.append(row)
            print(f"decision {decision:3d}: " + ", ".join(f"{k} {v:+.2f}" for k, v in row.items())
                  + f"; simulator Q of the policy's action {true_q[own_index]:.1f}", flush=True)
        action, _ = probe.greedy(obs)
        obs, _, terminated, truncated, _ = env.step(probe.env_action(action))
        done = terminated or truncated
        decision += 1
    env.close()
    if not rows:
        parser.error("the episode ended before the first measured decision")
    print(f"\n{agent.task}, {len(rows)} states, {len(candidates)} candidates each, "
          f"horizon {args.horizon}, {search.num_simulations} simulations:")
    measured = [k for k in ("search", "one step", "true next obs") if not np.isnan([r[k] for r in rows]).all()]
    print("rank correlation with the simulator's Q: " + ", ".join(
        f"{k} {np.nanmean([r[k] for r in rows]):+.2f}" for k in measured))
    print("simulator Q over the policy's own action: " + ", ".join(
        f"{k} {np.mean([r[k] for r in rows]):+.2f}" for k in ("search gain", "one-step gain", "best gain"))
          + f"; spread (std over candidates): simulator {np.mean([r['simulator std'] for r in rows]):.2f}, "
          f"one step {np.mean([r['one-step std'] for r in rows]):.2f}")


if __name__ == "__main__":
    main()
