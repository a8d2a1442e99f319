#!/bin/bash
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=00:05:00
#SBATCH --mem=3000M
#SBATCH --output=%x-%j.out
# horovodrun starts the workers itself, its host list from Slurm's node list, through ssh on the
# other nodes: with no ssh between the nodes (both sides here, as on many clusters) it stops there
HOSTS=""
for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
    HOSTS="$HOSTS$node:$SLURM_NTASKS_PER_NODE,"
done
HOSTS=${HOSTS%,}
echo "horovodrun -np $SLURM_NTASKS -H $HOSTS"
horovodrun --gloo -np "$SLURM_NTASKS" -H "$HOSTS" --start-timeout 120 --gloo-timeout-seconds 120 \
    python -u horovod_train.py
