#!/usr/bin/env bash
# The demo (README's first command): installs the packages and builds, then trains fashion-cnn
# on Fashion-MNIST with phubd and 2 workers on this box, the same with ring allreduce, and
# prints a table (time per mini-batch, images/s, communication share, test accuracy per epoch)
# and a PNG of accuracy vs wall-clock time under results/demo/. In the PS run one worker is
# killed a third of the way through and restarted: it rejoins, and the accuracy is the same
# (--no-kill skips that). Ctrl-C stops everything.
#
# Flags (passed to deploy/local/demo.py): --workers N (2), --epochs E (2), --batch B (32 per
# worker), --lr (0.05), --modes ps,ring; quick run: --steps N (mini-batches per worker per epoch,
# on the first N x workers x batch training images), --min-accuracy PCT (exit 1 under it).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,11p' "$0"; exit 0; fi

echo "== installing packages and building (first run takes a few minutes) =="
bash deploy/install-deps.sh
bash deploy/build.sh >/dev/null
exec /usr/bin/python3 deploy/local/demo.py "$@"
