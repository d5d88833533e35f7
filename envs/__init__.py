"""Environments (``ez_robot.envs``): the task registry, DMControl with per-dimension
discretization and the Atari 100k protocol arrive with the environments issue."""
