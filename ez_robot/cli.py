"""The ``ez-robot`` command line."""
import click

import ez_robot


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(ez_robot.__version__, prog_name="ez-robot")
def main():
    """ez-robot: train EfficientZero agents and run their search policy on robots."""


if __name__ == "__main__":
    main()
