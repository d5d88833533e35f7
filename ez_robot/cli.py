"""The ``ez-robot`` command line."""
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
    or a substring like 'pong')."""
    from ez_robot import envs

    names = envs.task_names(pattern)
    if not names:
        raise click.ClickException(f"no task matches {pattern!r}")
    click.echo("\n".join(names))


@main.command()
@click.option("--task", required=True, help="Task name (see `ez-robot tasks`), e.g. cartpole_swingup or atari:Pong.")
@click.option("--budget", default=None, help="Run length with a k/M suffix (Atari: agent steps; DMC: env steps).")
@click.option("--obs", type=click.Choice(["state", "pixels"]), default="state", show_default=True,
              help="Observation kind for DMControl tasks.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Run directory (default runs/<task>-<timestamp>).")
@click.option("--workers", type=int, default=0, show_default=True,
              help="Self-play workers; 0 runs everything in one process.")
@click.option("--envs", "num_envs", type=int, default=1, show_default=True,
              help="Environments stepped together by the single-process actor.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override any config key, e.g. --set train.lr=0.1 (repeatable).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def train(task, budget, obs, seed, device, run_dir, workers, num_envs, overrides, quiet):
    """Train an EfficientZero agent on TASK."""
    import time
    from pathlib import Path

    from ez_robot import envs
    from ez_robot.config import ConfigError, load_config

    try:
        envs.validate_task(task)
        config = load_config(task, obs=obs, budget=budget, seed=seed, overrides=overrides)
    except (ConfigError, envs.UnknownTaskError) as error:
        raise click.UsageError(str(error)) from None
    if workers != 0:
        raise click.UsageError("--workers N (the Ray trainer) is not available yet; use --workers 0")
    if num_envs < 1:
        raise click.UsageError(f"--envs must be >= 1, got {num_envs}")
    from ez_robot.trainer import train as run_training

    run_dir = Path(run_dir or f"runs/{task.replace(':', '-')}-{time.strftime('%Y%m%d-%H%M%S')}")
    click.echo(f"run directory: {run_dir}  ({config.agent_steps_budget} agent steps = "
               f"{config.env_frames_budget} env frames; budget counts {config.env.budget_unit})")
    try:
        summary = run_training(config, run_dir, device=device, num_envs=num_envs, progress=not quiet)
    except ValueError as error:
        raise click.ClickException(str(error)) from None
    except FloatingPointError as error:
        raise click.ClickException(f"training diverged: {error}; the last good checkpoint is in {run_dir}") from None
    click.echo(f"done: {summary['agent_steps']} agent steps, {summary['train_steps']} training steps, "
               f"{summary['wall_seconds']:.0f} s; last evaluation: {summary['last_eval'].get('mean', 'none')}")


if __name__ == "__main__":
    main()
