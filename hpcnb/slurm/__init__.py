"""Slurm's language, written once: option table and parser (:mod:`.options`), time specs and
durations (:mod:`.times`), sizes (:mod:`.sizes`), job states (:mod:`.states`), GPU requests
(:mod:`.gpus`), ``--constraint`` features (:mod:`.constraints`) and ``--array`` specs (:mod:`.arrays`).

Everything that reads or writes what Slurm's commands take or print imports it from here: the job
API, the linter, site profiles, grading and the local Slurm behind Slurm's commands. It imports nothing else
of hpcnb.
"""
