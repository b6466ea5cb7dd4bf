#!/usr/bin/env bash
# Create the environment in which MosaicML Streaming's own reader checks `clusterclip export --format mds`
# (docs/export.md, tests/test_export_mds.py): mosaicml-streaming 0.13.0 with numpy 2.1, transformers 4 and the
# CPU torch, beside (never inside) the project's environment. Usage: scripts/mds-env.sh [VENV]; prints the
# environment's python, for CLUSTERCLIP_MDS_PYTHON. Nothing is done when VENV/.installed exists.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=$(realpath -m "${1:-$ROOT/.venv-mds}")
PYTHON=${PYTHON:-python3}
if [ ! -f "$VENV/.installed" ]; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q torch==2.13.0  # the CPU build, first, as for the project's environment
  "$VENV/bin/pip" install -q -r "$ROOT/scripts/mds-requirements.txt"
  "$VENV/bin/pip" install -q --no-deps mosaicml-streaming==0.13.0
  # `import streaming` imports streaming.vision, which imports torchvision.datasets.VisionDataset and
  # torchvision.transforms.functional.to_tensor (its image datasets' base class and transform). The torchvision
  # 0.28.0 wheel for torch 2.13.0 on PyPI is built for CUDA torch (its _C.so needs libc10_cuda.so) and fails on
  # import next to the CPU torch. Text and token columns never use either name, so a stub stands in for them.
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$site/torchvision/datasets" "$site/torchvision/transforms"
  echo '"""Stub (scripts/mds-env.sh): only the two names streaming.vision imports; no vision support."""' \
    > "$site/torchvision/__init__.py"
  printf 'import torch.utils.data\n\n\nclass VisionDataset(torch.utils.data.Dataset):\n    """Stub."""\n' \
    > "$site/torchvision/datasets/__init__.py"
  : > "$site/torchvision/transforms/__init__.py"
  printf 'def to_tensor(pic):\n    raise NotImplementedError("torchvision stub (scripts/mds-env.sh)")\n' \
    > "$site/torchvision/transforms/functional.py"
  "$VENV/bin/python" -c 'import streaming; assert streaming.__version__ == "0.13.0"'
  touch "$VENV/.installed"
fi
echo "$VENV/bin/python"
