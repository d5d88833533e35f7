#!/bin/bash
# Packs what a lent GPU machine (see the device tool) lacks, for `run(carry=[".whl", ".gl"])`:
# its image has torch+CUDA, numpy, onnx, onnxruntime, matplotlib, ... but not mujoco, dm-control,
# gymnasium, ale-py or Ray, and it cannot download.  Writes .whl/site.tar.xz (~45 MB: the cp312
# wheels unzipped, Ray and dm-control trimmed to stay under the 64 MiB a call may carry) and
# .gl/ (the EGL loader packages).  Run once from the repository root, on a machine with pip access.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
grep -qx "/.gl/" .git/info/exclude 2>/dev/null || echo "/.gl/" >> .git/info/exclude
work=$(mktemp -d)
platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
for package in mujoco==3.17.0 dm_control==1.0.50 dm-env==1.6 dm-tree==0.1.10 glfw==2.11.0 PyOpenGL==3.1.10 \
               gymnasium==1.4.0 Farama-Notifications==0.0.6 ale-py==0.12.1 ray==2.60.0 jsonschema==4.26.0 \
               jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        $platforms -d "$work/wheels" "$package"
done
mkdir "$work/site"
for wheel in "$work"/wheels/*.whl; do unzip -q -o "$wheel" -d "$work/site"; done
# not needed to train: Ray's Java and libraries, dm-control's locomotion and dog assets, MuJoCo Studio
(cd "$work/site" && rm -rf ray/jars ray/rllib ray/data ray/serve ray/llm ray/tune ray/train \
    dm_control/locomotion dm_control/suite/dog_assets mujoco/experimental/studio)
mkdir -p .whl .gl
tar -cf - -C "$work/site" . | xz -9 -T0 > .whl/site.tar.xz
mkdir -p "$work/apt/partial"
apt_options="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=$work/apt"
apt-get $apt_options update > /dev/null
(cd .gl && apt-get $apt_options download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
rm -rf "$work"
ls -la .whl/site.tar.xz .gl
