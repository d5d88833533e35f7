"""Settings for the tests' own process."""
from ez_robot.device import set_threads

# One torch thread, as every ez-robot process runs (ez_robot.device.set_threads): torch's
# default, one per core, spins its OpenMP workers against any other busy process and can
# make a test many times slower beside a training run (benchmarks/README.md, "Threads and
# subnormal floats").
set_threads(1)
