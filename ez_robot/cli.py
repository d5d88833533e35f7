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


if __name__ == "__main__":
    main()
