#!/bin/bash
# Session 24, on the H200: the captures that fail `validate --no-addresses` in traces/ only because
# they were recorded before the capture noted the driver's memory, recorded again with the hook
# (same scripts, seeds, arguments). Held out for the driver-memory rule (fitted on the H100).
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
C=research/driver-probes/s23/cap.sh; export CAPS_TAR=1
bash $C vit_b32_train=research/band/band_workloads.py:vit_b32_train \
        gpt2_small_train=research/band/band_workloads.py:gpt2_small_train \
        t5_generate=research/driver-probes/s24/w_run.py:t5_generate,6 \
        emptycache_lm=research/driver-probes/midrun.py:emptycache,/tmp/midrun_out \
        densenet121_train=scripts/nogpu_heldout.py:densenet121_train,6 \
        efficientnet_train=research/driver-probes/asyncheld/workloads.py:efficientnet_train,8 \
        llama_generate_b=research/band/band_workloads.py:llama_generate_b
STACKS=python bash $C qwen2_generate_long__python=research/driver-probes/asyncheld/workloads.py:qwen2_generate,2
bash $C opt350_serve=research/band/workloads_new.py:opt350_serve,60
