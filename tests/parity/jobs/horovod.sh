#!/bin/bash
#SBATCH --job-name=horovod
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --time=00:05:00
#SBATCH --mem=3000M
#SBATCH --output=%x-%j.out
# --mem: here both virtual nodes are one machine, so horovodrun starts all 4 workers inside the
# batch step on node1, which is held to node1's memory (on a cluster it would ssh to node2)
# horovodrun starts the workers itself: its host list comes from Slurm's node list
HOSTS=""
for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
    HOSTS="$HOSTS$node:$SLURM_NTASKS_PER_NODE,"
done
HOSTS=${HOSTS%,}
echo "horovodrun -np $SLURM_NTASKS -H $HOSTS"
horovodrun --gloo -np "$SLURM_NTASKS" -H "$HOSTS" --start-timeout 120 --gloo-timeout-seconds 120 \
    python -u horovod_train.py
