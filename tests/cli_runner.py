"""The command line run in the test's own process (click's CliRunner) where a case only
checks a message: a Python start with torch costs ~3 s a case."""
from click.testing import CliRunner

from ez_robot.cli import main


def user_error(*args):
    """Runs ``ez-robot ARGS``, which must stop with ez-robot's own message (click's exit,
    no traceback); returns click's result (``.stderr``: the message)."""
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result
