"""``python -m hpcnb.lessons.tuning compile-probe ...``: :func:`measure_compile`'s own process."""
from __future__ import annotations

import sys

from .compiling import _compile_probe

if len(sys.argv) == 6 and sys.argv[1] == "compile-probe":
    _compile_probe(*sys.argv[2:])
else:
    print("usage: python -m hpcnb.lessons.tuning compile-probe CONFIG_JSON DATASET_JSON EPOCHS DEVICE", file=sys.stderr)
    sys.exit(2)
