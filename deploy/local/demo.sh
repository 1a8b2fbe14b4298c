#!/usr/bin/env bash
# The demo (README's first command): installs the packages and builds, then trains fashion-cnn
# on Fashion-MNIST through phubd and with ring allreduce, in two places: on an emulated PBox rack
# (deploy/netns/rack.sh: phubd's host with a 4 Gbit/s link, 4 worker hosts with 1 Gbit/s each;
# PS, PS with bf16 gradients, ring), where the exchange is half the step and the PS's N x B host
# beats the ring, and on loopback with 2 workers (PS, ring), where the compute dominates. One
# table (time per mini-batch, images/s, communication share, test accuracy per epoch, wall
# time) and one PNG of accuracy vs wall-clock time under results/demo/. In the loopback PS run
# one worker is killed a third of the way through and restarted: it rejoins, and the accuracy
# is the same (--no-kill skips that). The rack needs root; without it (or with --no-rack, or
# another rack up) the demo says why and runs on loopback only, whole epochs. About 5 minutes
# after the build on 2 cores (epochs shortened to fit, the test set whole). Ctrl-C stops
# everything and tears the rack down.
#
# Flags (passed to deploy/local/demo.py, whose --help lists all): loopback --workers N (2),
# --epochs E (2), --batch B (32 per worker), --modes ps,ring, --steps N (mini-batches per worker
# per epoch, on the first N x workers x batch training images; 500 beside the rack); rack
# --rack-workers (4), --rack-batch (64), --rack-rate (1gbit), --rack-epochs (2), --rack-steps
# (150), --rack-modes (ps,ps-bf16,ring), --no-rack; --lr (0.05), --min-accuracy PCT (exit 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,19p' "$0"; exit 0; fi

echo "== installing packages and building (first run takes a few minutes) =="
bash deploy/install-deps.sh
bash deploy/build.sh >/dev/null
exec /usr/bin/python3 deploy/local/demo.py "$@"
