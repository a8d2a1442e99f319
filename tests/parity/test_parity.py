"""The parity suite: the local Slurm against a real Slurm (22.05 or 24.11, HPCNB_REAL_SLURM), case by case.

Every case runs the same command or job script on both (see harness.py) and compares what a user
or a framework can observe; intentional differences are named in harness.INTENTIONAL. The cases
live in the cases_*.py modules and are collected here, in this one module, in this order:

  cases_1_errors   bad requests: messages and exit codes (the 14 captured sbatch cases, and more)
  cases_2_states   job states, exit codes, reasons, output (scancel, dependencies, arrays, OOM)
  cases_3_formats  sacct, squeue, sinfo, scontrol show job/node/partition/hostnames, file names
  cases_4_env      the SLURM_* environment of batch shells, srun tasks, salloc shells, arrays
  cases_5_lessons  lesson-level jobs: torch DDP (gloo), Lightning DDP, horovodrun --gloo
  cases_6_fidelity srun in an ended job or an --export job, srun -K, the queries of batchspawner,
                   dask-jobqueue, submitit
  cases_7_nodes    what a task sees of its node: hostname, network, the job's own /tmp and /dev/shm
  cases_9_long     TIMEOUT, --signal, requeue (started when the session starts, collected last)

One module, run in one process (``make test-parity``): cases running side by side would change
which node a job gets. Every test needs the real
Slurm of ``ci/real-slurm.sh up`` and is skipped, with the reason, without it. The table of
results: ``python -m tests.parity.report`` and test-artifacts/parity.md.
"""
import pytest

from .cases_1_errors import *  # noqa: F401,F403
from .cases_2_states import *  # noqa: F401,F403
from .cases_3_formats import *  # noqa: F401,F403
from .cases_4_env import *  # noqa: F401,F403
from .cases_5_lessons import *  # noqa: F401,F403
from .cases_6_fidelity import *  # noqa: F401,F403
from .cases_7_nodes import *  # noqa: F401,F403
from .cases_9_long import *  # noqa: F401,F403

pytestmark = pytest.mark.realslurm
