#!/bin/bash
#SBATCH --job-name=lightning-ddp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=00:05:00
#SBATCH --output=%x-%j.out
# Lightning reads Slurm's variables itself (SLURMEnvironment); a free port keeps jobs apart
export MASTER_PORT=$(python free_port.py)
srun python -u lightning_ddp.py
