#!/bin/bash
#SBATCH --job-name=ddp-gloo
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=00:05:00
#SBATCH --output=%x-%j.out
# torch DDP over gloo, one task per "device": rank 0 listens on the job's first node
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=$(python free_port.py)
echo "nodes: $(scontrol show hostnames "$SLURM_JOB_NODELIST" | tr '\n' ' ')master: $MASTER_ADDR"
srun python -u ddp_gloo.py
