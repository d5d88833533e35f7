"""The ``ez-robot`` command line."""
import contextlib
import shlex
from pathlib import Path

import click

import ez_robot


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(ez_robot.__version__, prog_name="ez-robot")
def main():
    """ez-robot: train EfficientZero agents and run their search policy on robots."""


@main.command()
@click.argument("pattern", required=False)
def tasks(pattern):
    """List the task names (optionally those matching PATTERN: a glob like 'walker_*'
    or a substring like 'pong'), each with the action mode its preset trains in."""
    from ez_robot import envs
    from ez_robot.config import load_config

    names = envs.task_names(pattern)
    if not names:
        raise click.ClickException(f"no task matches {pattern!r}")
    width = max(len(name) for name in names)
    for name in names:
        dims = envs.action_dims(name)
        if dims is None:
            mode = "joint (discrete actions)"
        else:
            env = load_config(name).env
            mode = {"joint": f"joint ({env.bins}^{dims} = {env.bins ** dims} actions)",
                    "factorized": f"factorized ({dims} dims x {env.factorized_bins} bins)",
                    "gaussian": f"gaussian ({dims} dims)"}[env.action_mode]
        click.echo(f"{name:<{width}}  {mode}")


_TRUST_TASK = click.option("--trust-task", is_flag=True,
                           help="Allow a task that is a factory (module:factory, file.py:factory), read from the run "
                                "or bundle, to import and call its code; only for runs and bundles you trust.")


def _help(name: str) -> str:
    from ez_robot.api import TrainOptions

    return TrainOptions.help(name)


@main.command()
@click.option("--task", default=None, help="Task name (see `ez-robot tasks`), e.g. cartpole_swingup or atari:Pong.")
@click.option("--budget", default=None, help=_help("budget"))
@click.option("--obs", type=click.Choice(["state", "pixels"]), default="state", show_default=True,
              help="Observation kind for DMControl tasks.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--run-dir", type=click.Path(file_okay=False), default=None, help=_help("run_dir"))
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None, metavar="RUN_DIR",
              help=_help("resume"))
@click.option("--workers", type=click.IntRange(min=0), default=None, help=_help("workers"))
@click.option("--reanalyze-workers", type=click.IntRange(min=0), default=None, help=_help("reanalyze_workers"))
@click.option("--address", default=None, metavar="ADDR", help=_help("address"))
@click.option("--gpus", type=click.FloatRange(min=0), default=None, help=_help("gpus"))
@click.option("--envs", "num_envs", type=click.IntRange(min=1), default=1, show_default=True, help=_help("num_envs"))
@click.option("--checkpoint-interval", type=click.IntRange(min=1), default=1000, show_default=True,
              help=_help("checkpoint_interval"))
@click.option("--replay-checkpoint/--no-replay-checkpoint", default=True, show_default=True,
              help=_help("replay_checkpoint"))
@click.option("--config", "config_files", multiple=True, metavar="FILE|NAME",
              help="A YAML file of config overrides, nested as the presets are (train: {lr: 0.1}), or the name "
                   "of a recipe in configs/recipes (e.g. ezv2_states); applied in order, before --set "
                   "(repeatable).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=_help("overrides"))
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help=_help("threads"))
@click.option("--seeds", default=None, metavar="0-4|0,2,5", help=_help("seeds"))
@click.option("--seeds-at-once", type=click.IntRange(min=1), default=None, help=_help("seeds_at_once"))
@click.option("--log-every", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              metavar="SECONDS", help=_help("log_every"))
@click.option("--wandb", is_flag=True, help=_help("wandb"))
@click.option("--video", type=click.IntRange(min=0), default=0, metavar="N", help=_help("video"))
@click.option("--trust-task", is_flag=True, help=_help("trust_task"))
@click.option("--quiet", is_flag=True, help="No progress bar or progress lines.")
def train(task, budget, obs, seed, device, run_dir, resume_dir, workers, reanalyze_workers, address, gpus, num_envs,
          checkpoint_interval, replay_checkpoint, config_files, overrides, threads, seeds, seeds_at_once, log_every,
          wandb, video, trust_task, quiet):
    """Train an EfficientZero agent on TASK, or resume a run (--resume RUN_DIR); with
    --seeds, train a group of seeds at once (--resume GROUP_DIR resumes the group)."""
    from click.core import ParameterSource

    from ez_robot.api import TrainingRequest, TrainOptions
    from ez_robot.config import recipe_overrides
    from ez_robot.groups import GroupRequest, is_group

    given = lambda name: click.get_current_context().get_parameter_source(name) is not ParameterSource.DEFAULT  # noqa: E731
    if resume_dir is None and task is None:
        raise click.UsageError("give --task (or --resume RUN_DIR to continue a run)")
    grouped = seeds is not None or (resume_dir is not None and is_group(resume_dir))
    with _user_errors():
        overrides = (*(text for source in config_files for text in recipe_overrides(source)), *overrides)
        options = TrainOptions(
            budget=budget, seed=seed if given("seed") or (resume_dir is None and not grouped) else None,
            obs=obs if given("obs") or resume_dir is None else None, overrides=overrides, run_dir=run_dir,
            resume=resume_dir, workers=workers, reanalyze_workers=reanalyze_workers, address=address, gpus=gpus,
            device=device, num_envs=num_envs, checkpoint_interval=checkpoint_interval,
            replay_checkpoint=replay_checkpoint, threads=threads, progress=not quiet, log_every=log_every,
            seeds=seeds, seeds_at_once=seeds_at_once, wandb=wandb, video=video,
            trust_task=trust_task)
        if grouped:
            request = GroupRequest.prepare(task, options, TrainingRequest)
        else:
            request = TrainingRequest.prepare(task, options)
    if grouped:
        _train_group(request)
    else:
        _train_run(request)


def _train_group(group) -> None:
    try:
        with _user_errors():
            group.run(click.echo)
    except KeyboardInterrupt:
        click.echo("\ninterrupted; every seed stopped with its checkpoint, and "
                   f"`ez-robot train --resume {shlex.quote(str(group.dir))}` resumes the group", err=True)
        raise SystemExit(130) from None


def _train_run(request) -> None:
    from ez_robot.checkpoint import checkpoint_path

    try:
        with _user_errors():
            request.run(click.echo)
    except FloatingPointError as error:
        where = request.run_dir
        place = f"the last good checkpoint is in {where / 'checkpoints'}" if checkpoint_path(where).exists() \
            else "no checkpoint was written before it"
        raise click.ClickException(f"training diverged: {error}; {place} (a lower train.lr may help)") from None
    except KeyboardInterrupt:
        if checkpoint_path(request.run_dir).exists():
            click.echo(f"\ninterrupted; the checkpoint in {request.run_dir} resumes it: ez-robot train --resume "
                       f"{shlex.quote(str(request.run_dir))}", err=True)
        else:
            click.echo(f"\ninterrupted before the first checkpoint; nothing to resume in {request.run_dir}",
                       err=True)
        raise SystemExit(130) from None


@contextlib.contextmanager
def _user_errors():
    """ez-robot's own errors as one-line messages (configuration mistakes as usage errors);
    anything else is a bug and keeps its traceback."""
    from ez_robot.errors import ConfigError, EzRobotError

    try:
        yield
    except ConfigError as error:
        raise click.UsageError(str(error)) from None
    except EzRobotError as error:
        raise click.ClickException(str(error)) from None


@main.command("eval")
@click.argument("run_dir", type=click.Path())
@click.option("--episodes", type=int, default=None,
              help="Evaluation episodes (default from the run's config: 32 for Atari, 10 for DMC).")
@click.option("--checkpoint", type=click.Path(), default=None, help="A checkpoint file (default: the latest).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the first episode (then +1 each).")
@click.option("--video", "video", is_flag=False, flag_value=1, default=0, type=int, metavar="[N]",
              help="Write mp4 replays of the first N episodes (N=1 when given alone) to RUN_DIR/videos.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="Torch threads.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--set", "overrides", multiple=True, metavar="search.KEY=VALUE",
              help="Change a search setting for this evaluation (repeatable), e.g. "
                   "--set search.num_simulations=8; the networks and the env stay the run's.")
@click.option("-o", "--out", type=click.Path(dir_okay=False), default=None,
              help="File for the report (default: RUN_DIR/eval.json, or RUN_DIR/eval-<label>.json "
                   "with --set or an earlier --checkpoint).")
@_TRUST_TASK
def evaluate(run_dir, episodes, checkpoint, seed, video, device, threads, quiet, overrides, out, trust_task):
    """Evaluate a trained run with greedy search in eval-mode envs.

    Writes RUN_DIR/eval.json, the run's score that `ez-robot report` reads.  With --set, or
    a --checkpoint other than the latest, the report goes to RUN_DIR/eval-<label>.json
    instead (e.g. eval-num_simulations=8.json), so the run's own score stays."""
    from ez_robot.evaluation import evaluate_run

    if episodes is not None and episodes < 1:
        raise click.UsageError(f"--episodes must be >= 1, got {episodes}")
    if video < 0:
        raise click.UsageError(f"--video must be >= 0, got {video}")
    with _user_errors():
        result = evaluate_run(run_dir, episodes=episodes, seed=seed, checkpoint=checkpoint, video=video,
                              device=device, progress=not quiet, threads=threads, search_overrides=overrides,
                              out=out, trust_task=trust_task)
    line = (f"{result['task']}: {result['episodes']} episodes, return {result['mean']:.2f} +- {result['std']:.2f} "
            f"(min {result['min']:.2f}, max {result['max']:.2f})")
    if "human_normalized" in result:
        line += f", human-normalized {result['human_normalized']:.3f}"
    if "success_rate" in result:  # the env reports info["is_success"]
        line += f", success rate {result['success_rate']:.0%}"
    if result["failed_episodes"]:  # the env raised: played again on a new env (eval.json lists the errors)
        line += f"; failed episodes played again: {result['failed_episodes']}"
    click.echo(line)
    for path in result["videos"]:
        click.echo(f"video: {path}")
    click.echo(f"wrote {result['path']}")


@main.command()
@click.argument("run_dirs", nargs=-1, type=click.Path())
@click.option("-o", "--out", type=click.Path(file_okay=False), default="report", show_default=True,
              help="Directory for the PNG curves and report.md (results.md and img/ with --results).")
@click.option("--results", type=click.Path(dir_okay=False), default=None,
              help="A results file (benchmarks/results.csv) to write the results page from, instead of run directories.")
@click.option("--peers", type=click.Path(dir_okay=False), default=None,
              help="With --results: other systems' figures to set beside ours (benchmarks/peers.csv).")
@click.option("--ticks", type=click.Path(dir_okay=False), default=None,
              help="A tick log of `ez-robot run` to sum up instead: rate achieved, decision times, fallbacks "
                   "by reason, rate-limit clips, missed deadlines.")
def report(run_dirs, out, results, peers, ticks):
    """Learning curves and result tables for one or more runs (seeds, tasks, Atari games;
    a group directory stands for its seeds' runs),
    the results page of a results file (--results), or the summary of a tick log (--ticks)."""
    if ticks:
        from ez_robot.export.ticks import format_summary, summarize_ticks

        if run_dirs or results:
            raise click.UsageError("give --ticks FILE alone, without run directories or --results")
        with _user_errors():
            click.echo(format_summary(summarize_ticks(ticks)))
        return
    with _user_errors():
        if results:
            from ez_robot.results import write_results_page

            if run_dirs:
                raise click.UsageError("give run directories or --results, not both")
            command = " ".join(["ez-robot report --results", results] + (["--peers", peers] if peers else [])
                               + ["--out", out])
            path = write_results_page(results, out, peers=peers, command=command)
        else:
            from ez_robot.report import write_report

            from ez_robot.groups import group_runs

            if not run_dirs:
                raise click.UsageError("give one or more run directories, --results FILE or --ticks FILE")
            path = write_report(group_runs(run_dirs), out)
    click.echo(f"wrote {path} and its curves")


@main.command("export")
@click.argument("run_dir", type=click.Path())
@click.option("-o", "--out", type=click.Path(file_okay=False), default=None,
              help="Bundle directory (default RUN_DIR/bundle).")
@click.option("--checkpoint", type=click.Path(), default=None, help="A checkpoint file (default: the latest).")
@click.option("--observations", type=click.IntRange(min=1), default=32, show_default=True,
              help="Observations recorded from the task to check the bundle against torch on.")
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True, help="Torch threads.")
@_TRUST_TASK
def export(run_dir, out, checkpoint, observations, threads, trust_task):
    """Export a trained run as ONNX networks in a bundle for the onboard runtime, and check
    the bundle against torch before reporting success."""
    from ez_robot.device import set_threads
    from ez_robot.export.onnx_export import export_run

    set_threads(threads)
    with _user_errors():
        manifest = export_run(run_dir, out, checkpoint=checkpoint, observations=observations, trust_task=trust_task)
    check = manifest["validation"]
    click.echo(f"checked on {check['observations']} recorded observations: max |onnx - torch| "
               f"{max(check['max_abs_diff'].values()):.1e} (tolerance {check['atol']:.0e} + {check['rtol']:.0e} x "
               f"max |torch|); greedy {check['num_simulations']}-simulation actions equal to torch's: "
               f"{check['actions_equal']}/{check['observations']}")
    click.echo(f"wrote {Path(out) if out else Path(run_dir) / 'bundle'}")


@main.command("run")
@click.argument("bundle", type=click.Path())
@click.option("--task", default=None, help="Task to run on (default: the bundle's task).")
@click.option("--episodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--rate", type=float, default=None, metavar="HZ",
              help="Decisions per second, > 0 (default: the task's control rate, from the bundle).")
@click.option("--simulations", type=click.IntRange(min=0), default=None,
              help="Simulations per decision (default: the bundle's search config); a decision stops "
                   "early when its tick runs out.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the first episode (then +1 each).")
@click.option("--video", type=click.Path(dir_okay=False), default=None, help="Write the first episode to this mp4.")
@click.option("--fallback", default="hold", show_default=True, metavar="hold|neutral|ACTION",
              help="Action of a tick without a fresh, finite reading or a decision in time: the last action "
                   "sent, neutral (0 where the bounds hold 0, else their middle), or values separated by commas.")
@click.option("--stop-action", default="neutral", show_default=True, metavar="neutral|hold|ACTION",
              help="Action sent first when the run stops (its end, Ctrl-C, SIGTERM, an error).")
@click.option("--max-age-ms", type=float, default=None, metavar="MS",
              help="A reading older than this is stale and gets the fallback (default: two ticks).")
@click.option("--max-change", default=None, metavar="X[,X...]",
              help="Rate limit: the most each action dimension may change per tick, in the action's units "
                   "(default: none).")
@click.option("--low", default=None, metavar="X[,X...]", help="Lower action bounds, within the bundle's.")
@click.option("--high", default=None, metavar="X[,X...]", help="Upper action bounds, within the bundle's.")
@click.option("--stop-after-fallbacks", type=click.IntRange(min=1), default=None, metavar="N",
              help="Stop (stop action first) after N fallback ticks in a row (default: never).")
@click.option("--ticks", "ticks_path", type=click.Path(dir_okay=False), default=None,
              help="The tick log (JSON lines; `ez-robot report --ticks FILE` sums it up); default "
                   "ticks-<time>.jsonl beside the bundle.")
@_TRUST_TASK
def run(bundle, task, episodes, rate, simulations, seed, video, fallback, stop_action, max_age_ms, max_change, low,
        high, stop_after_fallbacks, ticks_path, trust_task):
    """Run an exported BUNDLE at a fixed control rate on onnxruntime (no torch), guarded (a
    fallback action for stale, missing or non-finite readings and late decisions; bounds and
    an optional rate limit; the stop action first on Ctrl-C or SIGTERM), and report the
    achieved rate, missed deadlines, fallbacks and returns."""
    import math
    import time

    from ez_robot.export.guards import Guards, parse_action, parse_numbers
    from ez_robot.export.runtime import Policy

    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise click.UsageError(f"--rate must be a number of Hz > 0, got {rate:g}")
    with _user_errors():
        guards = Guards(fallback=parse_action(fallback, "--fallback"),
                        stop_action=parse_action(stop_action, "--stop-action"), max_age_ms=max_age_ms,
                        max_change=None if max_change is None else parse_numbers(max_change, "--max-change"),
                        low=None if low is None else parse_numbers(low, "--low"),
                        high=None if high is None else parse_numbers(high, "--high"),
                        stop_after_fallbacks=stop_after_fallbacks)
        policy = Policy.load(bundle, num_simulations=simulations)
        robot, period = _simulated_robot(policy, bundle, task, seed, trust_task)
    rate = rate or (1.0 / period if period else None)
    if rate is None:
        robot.close()
        raise click.UsageError("give --rate HZ (> 0): the bundle does not give this task's control rate")
    if ticks_path is None:
        ticks_path = Path(bundle).resolve().parent / f"ticks-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    recorder = None
    if video:
        from ez_robot.export.controller import VideoRecorder

        robot.on_step = recorder = VideoRecorder(video, fps=rate)
    try:
        with _user_errors():  # a video of a task without a renderer, a guard setting that does not fit, say
            from ez_robot.export.controller import run_loop

            report = run_loop(policy, robot, rate_hz=rate, guards=guards, episodes=episodes, ticks=ticks_path)
    finally:
        robot.close()
        if recorder is not None:
            recorder.close()
    if recorder is not None:
        click.echo(f"video: {video}")
    click.echo(report.summary())
    for error in robot.env_errors:
        click.echo(f"the env failed and was made again: {error}", err=True)
    click.echo(f"ticks: {report.ticks_path}")
    if report.stop_reason in ("SIGINT", "SIGTERM"):
        raise SystemExit(128 + {"SIGINT": 2, "SIGTERM": 15}[report.stop_reason])


def _simulated_robot(policy, bundle, task, seed, trust_task=False):
    """The bundle's task (or ``task``) as a simulated robot taking the robot's own actions,
    and its control period (None where neither the bundle nor the env gives one)."""
    import dataclasses

    try:
        import gymnasium as gym
    except ImportError:
        raise click.ClickException("ez-robot run plays the bundle's task in its simulator, which needs the train "
                                   "extra (pip install 'ez-robot[train]'); on a robot, drive your own Robot with "
                                   "ez_robot.export.controller.run_loop (docs/export_and_runtime.md)") from None

    from ez_robot import envs
    from ez_robot.config import config_from_dict
    from ez_robot.errors import BundleError, ConfigError
    from ez_robot.export.robot import SimulatedRobot

    try:
        env_config = config_from_dict(policy.manifest["config"]).env
    except (ConfigError, KeyError, TypeError, AttributeError) as error:
        raise BundleError(f"{bundle}'s manifest holds no valid training config ({type(error).__name__}: "
                          f"{error}); re-export the run") from None
    if task is not None:
        envs.validate_task(task)
        env_config = dataclasses.replace(env_config, task=task)
    envs.require_trusted_task(env_config.task, env_config.kwargs, trusted=trust_task or task is not None,
                              origin=f"the manifest of {bundle}", also=" or give the same --task")
    env = envs.make_from_config(env_config, seed=seed, mode="eval")
    spec = policy.action_spec
    shape = tuple(env.observation_space.shape)
    actions = tuple(env.action_space.shape) if spec.sampled else getattr(env.action_space, "n", None)
    if (shape, actions) != (policy.observation_shape, (spec.dims,) if spec.sampled else spec.num_actions):
        env.close()
        raise click.ClickException(f"{env_config.task} does not fit this bundle: it gives observations of shape "
                                   f"{shape} and actions {env.action_space}, the bundle takes "
                                   f"{policy.observation_shape} and {spec.describe()} actions")
    period = policy.control_period_s if env_config.task == policy.task else \
        getattr(env.unwrapped, "control_period", None)
    made = [env]  # the env made for the check is the robot's first

    def make(env_seed):
        task_env = made.pop() if made else envs.make_from_config(env_config, seed=env_seed, mode="eval")
        # the robot takes actions in its own units (the bundle's bounds), below the action mode's wrapper
        return task_env.env if policy.continuous and isinstance(task_env, gym.ActionWrapper) else task_env

    return SimulatedRobot(make, seed=seed), period


if __name__ == "__main__":
    main()
