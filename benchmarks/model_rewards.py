"""How well a DMControl run's learned model predicts rewards, where its search uses them.

    python benchmarks/model_rewards.py runs/cartpole_swingup --episodes 3
    python benchmarks/model_rewards.py runs/cartpole_swingup --from-decision 30

Plays the run's greedy search (as ``ez-robot eval``) and, from decision ``--from-decision``
on (cartpole_swingup: the pole is up after ~21), measures two things:

- one step, every action: at each decision the physics is copied and each of the joint
  actions is played from it (``action_repeat`` physics steps, dm_control's own reward),
  against the model's reward for that action from the root.  The search ranks the root
  actions partly by these; ``contrast`` compares the rewards relative to the mean over
  the actions (what ranking them needs), ``best`` is how often the model's highest reward
  is the simulator's highest.
- along the played trajectory, k steps deep (k = 1 .. unroll steps): the model unrolled on
  the actions taken, its per-step reward at depth k against the reward received.  With the
  value-prefix LSTM the per-step reward is the difference of two predicted prefixes
  (reset every ``lstm_horizon`` steps, as the search reads them); without it (the
  ``train.value_prefix=false`` ablation) each prediction is the reward.

Joint action mode only (one network action per joint action).
"""
from __future__ import annotations

import argparse

import numpy as np

import ez_robot
from ez_robot.inference import run_search
from ez_robot.torch_inference import TorchInference
from ez_robot.envs.dmc import DMControlEnv
from ez_robot.envs.wrappers import JointDiscreteActions


def simulated_rewards(env: DMControlEnv, vectors: np.ndarray) -> np.ndarray:
    """The reward of one agent step for each action vector, each played from the current
    physics state, which is restored afterwards."""
    dm_env = env._env
    physics, task = dm_env.physics, dm_env.task
    state = physics.get_state().copy()
    out = np.zeros(len(vectors))
    for i, vector in enumerate(vectors):
        with physics.reset_context():
            physics.set_state(state)
        for _ in range(env.action_repeat):
            task.before_step(vector, physics)
            physics.step(dm_env._n_sub_steps)
            task.after_step(physics)
            out[i] += task.get_reward(physics)
    with physics.reset_context():
        physics.set_state(state)
    return out


def unrolled_rewards(inference: TorchInference, observations: np.ndarray, actions: np.ndarray, depth: int,
                     lstm_horizon: int) -> np.ndarray:
    """[N, depth] the model's per-step rewards unrolled from each observation on the
    actions [N, depth] that followed it."""
    hidden = inference.root(observations).hidden
    previous = np.zeros(len(observations))
    out = np.zeros((len(observations), depth))
    for k in range(depth):
        reset = np.full(len(observations), k % lstm_horizon == 0)
        hidden, prefix, _, _ = inference.recurrent_fn(hidden, actions[:, k], reset)
        out[:, k] = prefix - np.where(reset, 0.0, previous)
        previous = prefix
    return out


def task_units(model_rewards: np.ndarray, env_config) -> np.ndarray:
    """The model's per-decision rewards, learned in training units (``env.reward_scale`` x
    (reward + ``env.reward_offset`` per simulator step)), back in the task's own."""
    return np.asarray(model_rewards) / env_config.reward_scale - env_config.reward_offset * env_config.action_repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory of a DMControl task (joint action mode)")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=100, help="seed of the first episode (then +1 each)")
    parser.add_argument("--from-decision", type=int, default=30, help="measure from this decision on")
    parser.add_argument("--checkpoint", default=None, help="a checkpoint file (default: the latest)")
    args = parser.parse_args()

    agent = ez_robot.load(args.run, checkpoint=args.checkpoint)
    domain, _, task = agent.task.partition("_")
    if not isinstance(agent._actions, JointDiscreteActions):
        parser.error(f"{args.run} does not use the joint action mode; this measures joint mode only")
    inference = TorchInference(agent._inference.net)
    num_actions = int(agent._actions.action_space.n)
    vectors = np.stack([np.asarray(agent._actions.action(a), np.float64).reshape(-1) for a in range(num_actions)])
    depth, horizon = agent.config.train.unroll_steps, agent._search.lstm_horizon
    one_step_true, one_step_model, chosen_true, returns = [], [], [], []
    unroll_true, unroll_model = [], []
    for episode in range(args.episodes):
        env = DMControlEnv(domain, task, seed=args.seed + episode, action_repeat=agent.config.env.action_repeat)
        obs, _ = env.reset(seed=args.seed + episode)
        observations, actions, rewards, done, decision = [], [], [], False, 0
        while not done:
            flat = np.asarray(obs, np.float32)
            out = run_search(agent._inference, flat[None], agent._search, agent._rng)
            action = int(out.actions[0])
            if decision >= args.from_decision:
                one_step_true.append(simulated_rewards(env, vectors))
                root = inference.root(np.repeat(flat[None], num_actions, axis=0))
                _, predicted, _, _ = inference.recurrent_fn(root.hidden, np.arange(num_actions),
                                                            np.ones(num_actions, bool))
                one_step_model.append(task_units(predicted, agent.config.env))
                chosen_true.append(one_step_true[-1][action])
            observations.append(flat)
            actions.append(action)
            obs, reward, terminated, truncated, _ = env.step(vectors[action])
            rewards.append(reward)
            decision += 1
            done = terminated or truncated
        env.close()
        returns.append(sum(rewards))
        starts = np.arange(args.from_decision, len(actions) - depth + 1)
        windows = starts[:, None] + np.arange(depth)[None]
        unroll_model.append(task_units(unrolled_rewards(inference, np.stack(observations)[starts],
                                                        np.array(actions)[windows], depth, horizon),
                                       agent.config.env))
        unroll_true.append(np.array(rewards)[windows])
        print(f"episode {episode}: return {returns[-1]:.1f}", flush=True)

    true, model = np.array(one_step_true), np.array(one_step_model)
    contrast_true = true - true.mean(axis=1, keepdims=True)
    contrast_model = model - model.mean(axis=1, keepdims=True)
    spread = (true.max(axis=1) - true.min(axis=1)).mean()
    print(f"\n{agent.task}: mean return {np.mean(returns):.1f} over {args.episodes} episodes; "
          f"{len(true)} decisions measured (from decision {args.from_decision}), {num_actions} actions each")
    print(f"one step, every action: reward MAE {np.abs(model - true).mean():.3f} (simulated rewards "
          f"{true.mean():.2f} on average, best-worst action spread {spread:.3f}); contrast MAE "
          f"{np.abs(contrast_model - contrast_true).mean():.3f}; model's best is the simulator's best in "
          f"{np.mean(model.argmax(1) == true.argmax(1)):.0%}; the action played loses "
          f"{(true.max(axis=1) - np.array(chosen_true)).mean():.3f} reward to the best one on average")
    u_true, u_model = np.concatenate(unroll_true), np.concatenate(unroll_model)
    errors = np.abs(u_model - u_true).mean(axis=0)
    print("along the trajectory, per-step reward MAE at depth 1.." + str(depth) + ": "
          + ", ".join(f"{e:.3f}" for e in errors) + f" (lstm_horizon {horizon})")


if __name__ == "__main__":
    main()
