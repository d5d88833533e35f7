"""Settings for the tests' own process."""
from ez_robot.device import set_threads

# One torch thread, as every ez-robot process runs (ez_robot.device.set_threads): torch's
# default, one per core, spins its OpenMP workers against any other busy process.  On the
# 2-core machine beside a training run, test_overfit_mdp_search_picks_optimal_action took
# 433 s with the default and 15 s with one thread (2026-12-05).
set_threads(1)
