"""The one way config sections check their fields.

Every section (``env``, ``model``, ``search``, ``replay``, ``train``, ``reanalyze``) checks
its values in ``__post_init__`` with :func:`check`, so a bad value is a
:class:`~ez_robot.errors.ConfigError` whose message names the key as a user writes it
(``search.num_simulations must be in [0, 100000], got -1``), whether it came from
``--set``, a YAML file, a saved run or a dataclass built in code.

Standard library only: the torch-free search (:mod:`ez_robot.mcts`) and the onboard
runtime check their settings with it.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

from ez_robot.errors import ConfigError

__all__ = ["check", "is_int", "is_finite_number", "one_of"]

Rule = tuple[str, bool, str]
"""(field name, whether its value is good, what it must be: ">= 1", "'sgd' or 'adam'")."""


def check(section: str, config: Any, rules: Iterable[Rule]) -> None:
    """Raises ConfigError for the first rule that fails: ``{section}.{name} must be {rule},
    got {value!r}``."""
    for name, ok, rule in rules:
        if not ok:
            raise ConfigError(f"{section}.{name} must be {rule}, got {getattr(config, name)!r}")


def is_int(value: Any) -> bool:
    """A whole number (Python's or numpy's), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A real number (Python's or numpy's), not a bool, neither infinite nor NaN."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def one_of(options: Iterable[str]) -> str:
    """The rule text for a choice: ``'none', 'default' or 'reduce-overhead'``."""
    quoted = [repr(option) for option in options]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
