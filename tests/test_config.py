"""Config presets, overrides, budgets and their error messages."""
import dataclasses
import json
import subprocess
import sys

import pytest

from ez_robot.config import (ConfigError, PRESET_DIR, RECIPE_DIR, config_from_dict, config_to_dict,
                             load_config, parse_budget, parse_override, recipe_overrides, search_config,
                             with_search_overrides)


def test_atari_preset_is_the_paper_table():
    c = load_config("atari:Pong")
    assert c.env.obs == "pixels" and c.env.frame_size == 96 and c.env.frame_stack == 4
    assert c.env.action_repeat == 4 and c.env.max_episode_frames == 108_000 and c.env.noop_max == 30
    assert c.search.discount == pytest.approx(0.997**4)
    assert (c.search.num_simulations, c.search.c1, c.search.c2) == (50, 1.25, 19652.0)
    assert (c.search.dirichlet_alpha, c.search.dirichlet_fraction, c.search.lstm_horizon) == (0.3, 0.25, 5)
    t = c.train
    assert (t.batch_size, t.lr, t.lr_final, t.momentum, t.weight_decay, t.max_grad_norm) == (256, 0.2, 0.02, 0.9,
                                                                                              1e-4, 5.0)
    assert (t.unroll_steps, t.td_steps, t.policy_loss_coef, t.value_loss_coef, t.consistency_loss_coef) == (
        5, 5, 1.0, 0.25, 2.0)
    assert (t.reanalyze_policy_ratio, t.selfplay_update_interval, t.target_update_interval, t.eval_episodes) == (
        0.99, 100, 200, 32)
    assert (c.replay.priority_alpha, c.replay.priority_beta_start, c.replay.min_replay_size) == (0.6, 0.4, 2000)
    assert c.model.lstm_hidden == 512 and 2 * c.model.support_size + 1 == 601
    # Atari 100k counts agent steps: 100k decisions, 400k frames.
    assert c.env.budget_unit == "agent_steps" and c.agent_steps_budget == 100_000 and c.env_frames_budget == 400_000


@pytest.mark.parametrize("task,repeat", [("cartpole_swingup", 8), ("finger_spin", 2), ("walker_walk", 2),
                                         ("cheetah_run", 4), ("reacher_easy", 4), ("ball_in_cup_catch", 4),
                                         ("hopper_hop", 4)])
def test_dmc_action_repeat_per_task(task, repeat):
    assert load_config(task).env.action_repeat == repeat


def test_dmc_budget_counts_simulator_steps():
    c = load_config("cartpole_swingup", budget="100k")
    assert c.env.budget_unit == "env_frames" and c.env.bins == 5
    assert c.env_frames_budget == 100_000 and c.agent_steps_budget == 12_500


def test_dmc_state_joint_mode_learns_costs_with_the_roots_mean_q():
    """The pair goes together: with the offset every return is negative, and the paper's
    Q = 0 for an unvisited root child would outscore every visited one."""
    for task in ("cartpole_swingup", "reacher_easy", "ball_in_cup_catch"):
        c = load_config(task)
        assert c.env.action_mode == "joint" and c.env.reward_offset == -1 and c.search.root_unvisited_q == "mean"
        assert c.cautions == []
    sampled = [load_config("quadruped_walk"), load_config("cartpole_swingup", overrides=["env.action_mode=gaussian"]),
               load_config("cheetah_run", overrides=["env.action_mode=factorized"])]
    for c in sampled:  # Gumbel search: no unvisited-child rule, and the sampled modes were measured without it
        assert c.env.action_mode != "joint" and c.env.reward_offset == 0 and c.search.root_unvisited_q == "zero"
    # both sampled modes train with Adam at a constant 3e-4; the joint mode keeps the paper's SGD schedule
    assert [(c.train.optimizer, c.train.lr, c.train.lr_final) for c in sampled] == [("adam", 3e-4, 3e-4)] * 3
    walker = load_config("walker_walk")  # the ezv2_states recipe's pieces, the value prefix kept
    assert (walker.env.reward_offset, walker.search.root_unvisited_q, walker.model.state_body) == (-1, "zero", "residual")
    assert (walker.search.discount, walker.train.entropy_coef, walker.train.value_prefix) == (0.997, 0.05, True)
    assert walker.cautions == [] and load_config("walker_run").search.discount == 0.997
    joint = load_config("cartpole_swingup")
    assert (joint.train.optimizer, joint.train.lr, joint.train.lr_final) == ("sgd", 0.2, 0.02)
    sgd = load_config("walker_walk", overrides=["train.optimizer=sgd", "train.lr=0.2", "train.lr_final=0.02"])
    assert (sgd.train.optimizer, sgd.train.lr, sgd.train.lr_final) == ("sgd", 0.2, 0.02)  # a user's --set wins
    for c in (load_config("atari:Pong"), load_config("gym:CartPole-v1"), load_config("cartpole_swingup", obs="pixels")):
        assert c.env.reward_offset == 0 and c.search.root_unvisited_q == "zero"  # the paper's, where measured
    paper = load_config("cartpole_swingup", overrides=["env.reward_offset=0", "search.root_unvisited_q=zero"])
    assert (paper.env.reward_offset, paper.search.root_unvisited_q) == (0, "zero")


def test_overrides_read_json_numbers_as_yaml_would_not():
    """Recipes and make_env() write their values with json.dumps; a factory's keyword
    arguments are not typed, so 1e-05 must arrive as a float."""
    assert parse_override("env.kwargs.gain=1e-05") == ("env.kwargs.gain", 1e-05)
    assert parse_override("env.kwargs={\"gain\": 2e-06, \"name\": \"arm\"}") == ("env.kwargs", {"gain": 2e-06, "name": "arm"})
    assert parse_override("train.lr=0.1") == ("train.lr", 0.1)
    assert parse_override("env.action_mode=gaussian") == ("env.action_mode", "gaussian")
    assert parse_override("env.kwargs={joints: 5}") == ("env.kwargs", {"joints": 5})  # YAML's flow mapping


def test_overrides_and_round_trip():
    c = load_config("cartpole_swingup", obs="pixels", seed=3,
                    overrides=["train.lr=0.1", "search.num_simulations=20", "train.consistency=false",
                               "env.action_repeat=2", "train.budget=4k", "search.discount=0.99**2"])
    assert (c.train.lr, c.search.num_simulations, c.train.consistency, c.env.action_repeat) == (0.1, 20, False, 2)
    assert c.train.budget == 4000 and c.seed == 3 and c.env.obs == "pixels"
    assert c.search.discount == pytest.approx(0.9801)
    assert config_from_dict(config_to_dict(c)) == c
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.train.lr = 1.0


@pytest.mark.parametrize("override,match", [
    ("train.lrr=0.1", r"unknown config key 'train.lrr'; did you mean: train.lr"),
    ("serch.num_simulations=3", r"did you mean: search.num_simulations"),
    ("search.num_simulations=-1", r"search.num_simulations must be in \[0, 100000\], got -1"),
    ("search.num_simulations=999999999999", r"search.num_simulations must be in \[0, 100000\], got 999999999999"),
    ("train.lr=inf", r"train.lr must be a finite number, got 'inf'"),
    ("train.lr=.inf", r"train.lr must be a finite number, got inf"),
    ("train.lr=nan", r"train.lr must be a finite number"),
    ("search.c1=1e999", r"search.c1 must be a finite number"),
    ("env.task=atari:Pong", r"--set env.task=atari:Pong disagrees with --task cartpole_swingup"),
    ("train.lr=fast", r"train.lr must be float, got 'fast'"),
    ("train.consistency=maybe", r"train.consistency must be bool"),
    ("env.obs=pixels", r"--set env.obs=pixels disagrees with --obs state"),
    ("replay.priority_alpha=2", r"replay.priority_alpha must be in \[0, 1\]"),
    ("train.optimizer=rmsprop", r"train.optimizer must be 'sgd' or 'adam'"),
    ("train.entropy=tanh", r"train.entropy must be 'pre_squash', 'squashed' or 'clipped'"),
    ("train.policy_target=argmax", r"train.policy_target must be 'full', 'best' or 'played'"),
    ("train.policy_target=played", r"train.policy_target=played needs a sampled action mode"),
    ("train.compile=max-autotune", r"train.compile must be 'none', 'default' or 'reduce-overhead'"),
    ("lr", r"bad --set 'lr': write key=value"),
])
def test_bad_overrides_name_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config("cartpole_swingup", overrides=[override])


def test_a_played_policy_target_makes_the_search_output_the_played_candidate():
    config = load_config("cheetah_run", overrides=["train.policy_target=played"])
    assert search_config(config).played_policy and not search_config(load_config("cheetah_run")).played_policy


@pytest.mark.parametrize("text,value", [("100k", 100_000), ("1.5M", 1_500_000), ("30000", 30_000), ("2K", 2000),
                                        (500, 500)])
def test_parse_budget(text, value):
    assert parse_budget(text) == value


@pytest.mark.parametrize("text", ["10x", "1e5", "", "k", "-5k", "0", "1.0005k", "100 000"])
def test_bad_budgets(text):
    with pytest.raises(ConfigError, match="bad budget"):
        parse_budget(text)


def test_a_budget_too_small_to_start_training_is_refused():
    with pytest.raises(ConfigError, match="below replay.min_replay_size"):
        load_config("gym:CartPole-v1", budget="500")  # the classic preset starts learning at 1000 moves
    assert load_config("gym:CartPole-v1", budget="500", overrides=["replay.min_replay_size=500"])


def test_every_preset_loads():
    names = sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))
    assert names == ["atari", "classic", "custom", "dmc_pixels", "dmc_state", "gym_mujoco"]
    for task, obs, preset in [("atari:Pong", "pixels", "atari"), ("gym:CartPole-v1", "state", "classic"),
                              ("walker_walk", "pixels", "dmc_pixels"), ("walker_walk", "state", "dmc_state"),
                              ("gym:Pendulum-v1", "state", "classic"), ("gym:Hopper-v5", "state", "gym_mujoco"),
                              ("gym:FrozenLake-v1", "state", "custom")]:
        config = load_config(task, obs=obs)
        assert config.preset == f"{preset}.yaml"


def test_a_recipe_is_the_command_it_names():
    """``--config ezv2_states`` is the walker/cheetah command of the README, --set flags
    given after it still win, and every shipped recipe loads on a DMC task."""
    v2 = ["env.action_repeat=2", "train.value_prefix=false", "train.optimizer=adam", "train.lr=3e-4",
          "train.lr_final=3e-4", "train.weight_decay=2e-5", "train.entropy_coef=0.05", "train.value_loss_coef=0.5",
          "search.discount=0.997", "model.state_body=residual", "env.reward_offset=-1"]
    assert load_config("cheetah_run", overrides=recipe_overrides("ezv2_states")) == load_config("cheetah_run",
                                                                                                 overrides=v2)
    c = load_config("walker_walk", overrides=[*recipe_overrides("ezv2_states"), "train.lr=1e-3"])
    assert c.train.lr == 1e-3 and c.train.optimizer == "adam" and not c.train.value_prefix
    assert c.model.state_body == "residual"
    assert load_config("cheetah_run").env.action_repeat == 4  # the preset itself is untouched
    names = sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))
    assert "ezv2_states" in names
    for name in names:
        load_config("walker_walk", overrides=recipe_overrides(name))


def test_a_config_file_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("seed: 7\ntrain: {lr: 0.05, budget: 40k}\nmodel: {state_body: residual}\n"
                    "env: {kwargs: {time_limit: 5}}\n")
    c = load_config("cartpole_swingup", overrides=recipe_overrides(path))
    assert (c.seed, c.train.lr, c.train.budget, c.model.state_body) == (7, 0.05, 40_000, "residual")
    assert c.env.kwargs == {"time_limit": 5}
    (tmp_path / "empty.yaml").write_text("")
    assert recipe_overrides(tmp_path / "empty.yaml") == []


@pytest.mark.parametrize("text,match", [
    ("train: {lrr: 0.1}\n", r"--config .*bad.yaml: unknown config key 'train.lrr'; did you mean: train.lr"),
    ("trian: {lr: 0.1}\n", r"--config .*bad.yaml: unknown config section 'trian'"),
    ("train: [lr, 0.1]\n", r"section 'train' must be a mapping of keys"),
    ("- train.lr=0.1\n", r"expected a mapping of sections"),
    ("train: {lr: [0.1\n", r"cannot read it as YAML"),
    ("train: {lr: fast}\n", r"train.lr must be float, got 'fast'"),
])
def test_bad_config_files_name_the_file_and_key(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_config("cartpole_swingup", overrides=recipe_overrides(path))


def test_search_overrides_of_a_trained_run_change_the_search_only():
    config = load_config("cheetah_run", overrides=["train.lr=0.05"])
    changed = with_search_overrides(config, ["search.num_simulations=8", "search.root_unvisited_q=mean"])
    assert changed.search.num_simulations == 8 and changed.search.root_unvisited_q == "mean"
    assert changed.search.num_candidates == config.search.num_candidates
    assert (changed.env, changed.model, changed.train, changed.seed) == (config.env, config.model, config.train,
                                                                         config.seed)
    assert changed.preset == config.preset
    assert with_search_overrides(config, []) is config
    assert with_search_overrides(config, "search.num_simulations=8").search.num_simulations == 8
    with pytest.raises(ConfigError, match="search settings only"):
        with_search_overrides(config, ["model.latent_dim=8"])
    with pytest.raises(ConfigError, match="num_simulations"):
        with_search_overrides(config, ["search.num_simulations=-1"])


def test_the_offset_caution_resolves_an_auto_action_mode_as_training_does():
    """A Config built in code keeps ``auto``; the caution reads the mode training will use."""
    from ez_robot.config import Config, EnvConfig, SearchConfig

    def built(task):
        return Config(env=EnvConfig(task=task, reward_offset=-1), search=SearchConfig(root_unvisited_q="zero"))

    assert built("cartpole_swingup").env.action_mode == "auto"
    assert len(built("cartpole_swingup").cautions) == 1  # 5 bins, 1 dimension: joint
    assert built("walker_walk").cautions == []  # 5^6 joint actions: gaussian, Gumbel search


def test_a_negative_reward_offset_is_named_where_episodes_can_end_early():
    """DMControl's episodes all last 1000 steps; a Gymnasium task's can end at a fall, where
    -1 per step would pay the agent to fall sooner (``--config ezv2_states`` sets it)."""
    costs = ["env.reward_offset=-1"]
    for task in ("gym:CartPole-v1", "gym:Hopper-v5", "atari:Pong"):
        (note,) = [n for n in load_config(task, overrides=costs).cautions if "time limit" in n]
        assert "ending it sooner pay" in note and "env.reward_offset=0" in note and task in note
        assert load_config(task).cautions == []
    (note,) = load_config("gym:Hopper-v5", overrides=recipe_overrides("ezv2_states")).cautions  # the recipe's costs
    assert "time limit" in note
    assert load_config("walker_walk", overrides=recipe_overrides("ezv2_states")).cautions == []
    pixels = load_config("cartpole_swingup", obs="pixels", overrides=costs)
    assert not [n for n in pixels.cautions if "time limit" in n]  # (the unvisited-Q one applies)


@pytest.mark.parametrize("overrides, caution", [
    ([], False),  # the preset's joint mode pairs the offset with the root's mean Q
    (["search.root_unvisited_q=zero"], True),
    (["env.reward_offset=0", "search.root_unvisited_q=zero"], False),
    (["env.reward_offset=0.5", "search.root_unvisited_q=zero"], False),
    (["env.reward_offset=-1", "env.action_mode=gaussian", "search.root_unvisited_q=zero"], False),  # Gumbel search
])
def test_a_negative_reward_offset_with_the_papers_unvisited_q_is_named_before_training(monkeypatch, tmp_path,
                                                                                      overrides, caution):
    from ez_robot.api import TrainingRequest, TrainOptions

    session = TrainingRequest.prepare("cartpole_swingup", TrainOptions(budget="100k", overrides=overrides, workers=0,
                                                                      run_dir=tmp_path / "run"))
    summary = {"last_eval": {}, "agent_steps": 0, "train_steps": 0, "wall_seconds": 0.0}
    monkeypatch.setattr("ez_robot.trainer.train", lambda config, run_dir, **options: summary)
    lines = []
    session.run(lines.append)
    named = [line for line in lines if line.startswith("caution:")]
    assert len(named) == caution and named == [f"caution: {text}" for text in session.config.cautions]
    if caution:
        assert "breadth-first" in named[0] and "search.root_unvisited_q=mean" in named[0]


@pytest.mark.parametrize("obs, cuda, caution", [("pixels", False, True), ("pixels", True, False),
                                                ("state", False, False)])
def test_training_from_pixels_on_a_cpu_is_named_before_it_starts(monkeypatch, tmp_path, obs, cuda, caution):
    """A pixel run on a CPU takes days (~20-30 s a training step); the user hears it first."""
    from ez_robot.api import TrainingRequest, TrainOptions

    monkeypatch.setattr("torch.cuda.is_available", lambda: cuda)
    session = TrainingRequest.prepare("cartpole_swingup", TrainOptions(obs=obs, budget="100k", workers=0,
                                                                      run_dir=tmp_path / "run"))
    summary = {"last_eval": {}, "agent_steps": 0, "train_steps": 0, "wall_seconds": 0.0}
    monkeypatch.setattr("ez_robot.trainer.train", lambda config, run_dir, **options: summary)
    lines = []
    session.run(lines.append)
    named = [line for line in lines if "from pixels on a CPU" in line]
    assert len(named) == caution
    if caution:
        assert named[0].startswith("caution:") and "--device auto" in named[0]


@pytest.mark.parametrize("section, key, value, match", [
    ("env", "action_repeat", 0, r"env.action_repeat must be >= 1, got 0"),
    ("env", "reward_offset", float("nan"), r"env.reward_offset must be a finite number, got nan"),
    ("model", "state_body", "resnet", r"model.state_body must be 'mlp' or 'residual', got 'resnet'"),
    ("replay", "priority_alpha", 2.0, r"replay.priority_alpha must be in \[0, 1\], got 2.0"),
    ("train", "compile", "max", r"train.compile must be 'none', 'default' or 'reduce-overhead', got 'max'"),
    ("reanalyze", "mode", "sweep", r"reanalyze.mode must be 'batch' or 'buffer', got 'sweep'"),
    ("search", "num_simulations", -1, r"search.num_simulations must be in \[0, 100000\], got -1"),
    ("search", "c1", float("inf"), r"search.c1 must be a finite number, got inf"),
    ("search", "root_unvisited_q", "max", r"search.root_unvisited_q must be 'zero' or 'mean', got 'max'"),
])
def test_every_section_checks_its_fields_alike(section, key, value, match):
    """Built in code or from --set, a bad value is a ConfigError naming the key as a user
    writes it; SearchConfig (the torch-free search's) included."""
    from ez_robot.config import SECTIONS

    with pytest.raises(ConfigError, match=f"^{match}$"):
        SECTIONS[section](**{key: value})
    with pytest.raises(ConfigError, match=f"^{match}$"):
        load_config("cartpole_swingup", overrides=[f"{section}.{key}={json.dumps(value)}"])


def test_a_search_config_built_in_code_with_a_wrong_type_is_a_config_error():
    """--set reads the type first (``search.num_simulations must be int``); in code,
    SearchConfig's own check says the same, as a ConfigError (a ValueError)."""
    from ez_robot.config import SearchConfig

    for key, value in [("num_simulations", 2.5), ("num_candidates", True), ("num_simulations", "8")]:
        with pytest.raises(ConfigError, match=f"^search.{key} must be an int, got {value!r}$"):
            SearchConfig(**{key: value})
    with pytest.raises(ConfigError, match=r"^search.num_simulations must be int, got 2.5$"):
        load_config("cartpole_swingup", overrides=["search.num_simulations=2.5"])


def test_importing_the_config_leaves_the_task_registry_unloaded():
    """A saved run's or a bundle's config loads without the training extras; the registry
    (and gymnasium) are imported when a task is first asked about."""
    code = ("import sys, ez_robot.config; "
            "print(sorted(m for m in ('ez_robot.envs', 'gymnasium', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
