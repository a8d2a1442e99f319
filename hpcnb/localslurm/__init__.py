"""The embedded local Slurm: a faithful, single-machine stand-in for Slurm 22.05 or 24.11 (the cluster's slurm_version).

Layout (one concern per module):
  paths       state directory and file locations
  db          the SQLite state (jobs, steps, id counter), safe under concurrent commands
  cluster     virtual nodes and partitions from a site profile
  request     command-line options -> a validated JobRequest (Slurm's error texts)
  alloc       resource accounting: does a request fit, and where
  scheduler   pending -> running decisions (dependencies, arrays, reasons)
  controller  the background daemon (started on first use) that schedules and launches
  wake        the commands' side of it: is it running, wake it, start it when jobs need it
  supervisor  runs one job's processes: limits, signals, cleanup, final state
  envvars     the SLURM_* environment of batch shells, srun tasks and salloc shells
  formats     squeue/sacct/sinfo/scontrol output
  commands/   sbatch, srun, salloc, squeue, sacct, scancel, scontrol, sinfo
"""
