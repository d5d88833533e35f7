#!/bin/bash
# On the lent GPU machine, from the repository root: `source benchmarks/device/setup.sh` unpacks
# what pack.sh made (carried as .whl and .gl), installs ez-robot without dependencies (builds the
# C++ tree) and exports the environment; ~22 s.  Skipped when a warm machine already has it.
J=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f $J ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$J
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 MUJOCO_GL=egl
if [ ! -d /tmp/site/ray ]; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    mkdir -p /tmp/site && tar -xJf .whl/site.tar.xz -C /tmp/site
    python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > /tmp/ez-install.log 2>&1 \
        || tail -20 /tmp/ez-install.log
fi
