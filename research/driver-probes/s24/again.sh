#!/bin/bash
# Session 24: emptycache_lm and densenet121_train still miss `validate --no-addresses` when
# recorded with the driver's notes; recorded twice more each (and vit_b32_train once more) to
# tell run-to-run variation of the driver's placements from a miss of the model.
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
C=research/driver-probes/s23/cap.sh; export CAPS_TAR=1
bash $C emptycache_lm_2=research/driver-probes/midrun.py:emptycache,/tmp/midrun_out \
        densenet121_train_2=scripts/nogpu_heldout.py:densenet121_train,6 \
        emptycache_lm_3=research/driver-probes/midrun.py:emptycache,/tmp/midrun_out \
        densenet121_train_3=scripts/nogpu_heldout.py:densenet121_train,6 \
        vit_b32_train_2=research/band/band_workloads.py:vit_b32_train
