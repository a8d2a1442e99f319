"""Slurm's job states: the one list, their short codes, which are final, and the base state of a
state as commands print it (``CANCELLED by 0``, sacct's cut ``CANCELLED+``)."""
from __future__ import annotations

__all__ = ["BASE", "CODES", "FINAL", "FLAGS", "base_state", "is_final"]

#: The base states, in the order of Slurm's ``job_states`` enum, with squeue's short codes.
BASE = {
    "PENDING": "PD", "RUNNING": "R", "SUSPENDED": "S", "COMPLETED": "CD", "CANCELLED": "CA", "FAILED": "F",
    "TIMEOUT": "TO", "NODE_FAIL": "NF", "PREEMPTED": "PR", "BOOT_FAIL": "BF", "DEADLINE": "DL",
    "OUT_OF_MEMORY": "OOM",
}
#: State flags that commands show in place of the base state, in the order squeue 22.05 lists them.
FLAGS = {
    "COMPLETING": "CG", "CONFIGURING": "CF", "RESIZING": "RS", "RESV_DEL_HOLD": "RD", "REQUEUED": "RQ",
    "REQUEUE_FED": "RF", "REQUEUE_HOLD": "RH", "REVOKED": "RV", "SIGNALING": "SI", "SPECIAL_EXIT": "SE",
    "STAGE_OUT": "SO", "STOPPED": "ST",
}
#: Every state name -> its short code (``job_state_string_compact``).
CODES = {**BASE, **FLAGS}
#: The states a job never leaves: COMPLETED and every base state after it (``IS_JOB_FINISHED``).
FINAL = frozenset(list(BASE)[list(BASE).index("COMPLETED"):])


def base_state(text: str) -> str:
    """``CANCELLED by 1000`` -> ``CANCELLED``; sacct's cut ``OUT_OF_ME+`` keeps its stem; others stay."""
    return text.strip().split(" ")[0].rstrip("+")


def is_final(state: str) -> bool:
    """Has a job in ``state`` (as any command prints it) ended for good?"""
    return base_state(state) in FINAL
