"""Old name of :mod:`hpcnb.slurm.options` (and its time helpers, now in :mod:`hpcnb.slurm.times`)."""
from hpcnb.slurm.options import *  # noqa: F403
from hpcnb.slurm.options import __all__ as _options_all
from hpcnb.slurm.times import format_limit as format_slurm_time, parse_time as parse_slurm_time

__all__ = [*_options_all, "format_slurm_time", "parse_slurm_time"]
