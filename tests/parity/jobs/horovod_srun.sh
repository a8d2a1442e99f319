#!/bin/bash
#SBATCH --job-name=horovod-srun
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=00:05:00
#SBATCH --output=%x-%j.out
# Horovod without horovodrun: srun starts one Slurm task per worker, on both nodes (lesson 10)
srun --distribution=block python -u horovod_train.py
