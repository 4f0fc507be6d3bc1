#!/usr/bin/env bash
# diffprobe sweep as a Slurm job array, then a merge. Submit from the checkout: sbatch docs/deploy/slurm-array.sh
#
# Each array task probes one shard: `--shard auto` reads SLURM_ARRAY_TASK_ID from SLURM_ARRAY_TASK_MIN in
# SLURM_ARRAY_TASK_STEPs of SLURM_ARRAY_TASK_COUNT, so the array size is written once (--array). The cache
# (downloads, trees, environments, receipts store) sits on a file system every node mounts; its build
# locks make sharing it safe, and a rerun reuses every receipt already observed. The first task submits
# the merge, which runs once the whole array has ended and joins the shard bundles into one sweep.
#SBATCH --job-name=diffprobe-sweep
#SBATCH --array=0-3
#SBATCH --cpus-per-task=2
#SBATCH --mem=8G
#SBATCH --output=diffprobe-sweep-%A_%a.log
set -euo pipefail
export DIFFPROBE_CACHE="${DIFFPROBE_CACHE:-$HOME/diffprobe-cache}"
releases="${RELEASES:-0.5.19..0.5.23}"
out="sweep-$SLURM_ARRAY_JOB_ID"
if [ "$SLURM_ARRAY_TASK_ID" = "$SLURM_ARRAY_TASK_MIN" ]; then
  sbatch --job-name=diffprobe-merge --dependency="afterany:$SLURM_ARRAY_JOB_ID" \
    --wrap=".venv/bin/diffprobe merge $out/shard-* --out $out/sweep && .venv/bin/diffprobe report $out/sweep --html $out/sweep.html"
fi
# exit 1 (a cell inconclusive) still leaves its bundle; the merge decides
.venv/bin/diffprobe sweep --releases "$releases" --shard auto --out "$out/shard-$SLURM_ARRAY_TASK_ID" || [ $? -eq 1 ]
