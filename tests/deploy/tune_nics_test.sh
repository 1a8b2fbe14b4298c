#!/usr/bin/env bash
# deploy/pbox/tune-nics.sh on a copy of /sys and /proc: phubd (argument 1) places 4 cores on
# the two-socket PBox two_socket_pbox.xml describes (eth0 on socket 0, eth1 on socket 1) and
# prints its map; the script's dry run changes nothing and says what it would; --apply sets
# IRQ affinity, XPS, RFS and (for eth1, a single-queue interface) RPS to the cores of each
# NIC; a second --apply changes nothing; a map that is not phubd's is refused.
set -euo pipefail
PHUBD=${1:?usage: tune_nics_test.sh PATH_TO_BUILT_PHUBD}
HERE=$(cd "$(dirname "$0")" && pwd)
SCRIPT=$HERE/../../deploy/pbox/tune-nics.sh
fail() { echo "FAIL: $*"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$PHUBD" --machine-xml "$HERE/two_socket_pbox.xml" --nics eth0,eth1 --cores 4 --print-core-map \
  >"$TMP/map.tsv"
cat "$TMP/map.tsv"
# Socket 0's cores (0-3) serve eth0, socket 1's (4-7) eth1, alternating.
[[ $(cut -f2,5,6 "$TMP/map.tsv" | tail -n +2 | tr '\t\n' ' ') == "0 0 eth0 4 1 eth1 1 0 eth0 5 1 eth1 " ]] ||
  fail "unexpected placement"

# eth0: a PCI NIC with 2 RX and 2 TX queues and 3 MSI-X vectors; eth1: one queue, no IRQs.
S=$TMP/sys P=$TMP/proc
mkdir -p "$S/class/net/eth0/device/msi_irqs" "$S/class/net/eth1" "$P/sys/net/core"
for q in rx-0 rx-1 tx-0 tx-1; do mkdir -p "$S/class/net/eth0/queues/$q"; done
mkdir -p "$S/class/net/eth1/queues/rx-0" "$S/class/net/eth1/queues/tx-0"
for d in "$S"/class/net/*/queues/rx-*; do echo 00000000 >"$d/rps_cpus"; echo 0 >"$d/rps_flow_cnt"; done
for d in "$S"/class/net/*/queues/tx-*; do echo 00000000 >"$d/xps_cpus"; done
for irq in 33 34 35; do
  touch "$S/class/net/eth0/device/msi_irqs/$irq"
  mkdir -p "$P/irq/$irq"; echo 0-7 >"$P/irq/$irq/smp_affinity_list"
done
echo 0 >"$P/sys/net/core/rps_sock_flow_entries"
snapshot() { (cd "$TMP" && find sys proc -type f | sort | xargs -I{} sh -c 'echo "{}=$(cat {})"'); }
before=$(snapshot)

dry=$(bash "$SCRIPT" --sysfs "$S" --procfs "$P" "$TMP/map.tsv")
echo "$dry"
[[ $(snapshot) == "$before" ]] || fail "the dry run changed something"
grep -q "would set $P/irq/34/smp_affinity_list: 0-7 -> 4" <<<"$dry" &&
  fail "eth0's IRQ went to a CPU of eth1's socket"
grep -q "would set $P/irq/34/smp_affinity_list: 0-7 -> 1" <<<"$dry" || fail "no IRQ line in the dry run"
grep -q "settings would change" <<<"$dry" || fail "no summary"
# The map on stdin (phubd ... --print-core-map | tune-nics.sh -, as the systemd example does).
[[ $(bash "$SCRIPT" --sysfs "$S" --procfs "$P" - <"$TMP/map.tsv") == "$dry" ]] ||
  fail "the map on stdin gave another plan"

bash "$SCRIPT" --apply --sysfs "$S" --procfs "$P" "$TMP/map.tsv"
check() { [[ $(cat "$1") == "$2" ]] || fail "$1 is '$(cat "$1")', expected '$2'"; }
check "$P/irq/33/smp_affinity_list" 0
check "$P/irq/34/smp_affinity_list" 1
check "$P/irq/35/smp_affinity_list" 0
check "$S/class/net/eth0/queues/tx-0/xps_cpus" 00000001
check "$S/class/net/eth0/queues/tx-1/xps_cpus" 00000002
check "$S/class/net/eth0/queues/rx-1/rps_flow_cnt" 16384
check "$S/class/net/eth0/queues/rx-0/rps_cpus" 00000000  # hardware queues enough: no RPS
check "$S/class/net/eth1/queues/rx-0/rps_cpus" 00000030  # CPUs 4 and 5
check "$S/class/net/eth1/queues/rx-0/rps_flow_cnt" 32768
check "$S/class/net/eth1/queues/tx-0/xps_cpus" 00000030
check "$P/sys/net/core/rps_sock_flow_entries" 32768
again=$(bash "$SCRIPT" --apply --sysfs "$S" --procfs "$P" "$TMP/map.tsv")
grep -q "^0 settings changed" <<<"$again" || fail "a second --apply changed something: $again"

printf 'not\ta map\n' >"$TMP/bad.tsv"
if bash "$SCRIPT" --sysfs "$S" --procfs "$P" "$TMP/bad.tsv" 2>"$TMP/err"; then fail "a bad map was taken"; fi
grep -q "print-core-map" "$TMP/err" || fail "the refusal does not say what a map is: $(cat "$TMP/err")"
echo "PASS"
