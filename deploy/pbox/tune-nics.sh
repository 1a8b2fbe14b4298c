#!/usr/bin/env bash
# tune-nics.sh: points a PBox's NIC queues at the phubd cores that serve them.
#
#   phubd --nics eth0,eth1 --cores 8 --print-core-map > core-map.tsv
#   deploy/pbox/tune-nics.sh core-map.tsv              # dry run: prints what it would change
#   sudo deploy/pbox/tune-nics.sh --apply core-map.tsv # changes it
#
# phubd places its cores by NUMA node and binds each to one NIC (--print-core-map: core,
# physical core, CPU, node, NIC, interface, address, RDMA device, queue). The kernel must then
# handle each NIC's packets on those cores, or every byte is touched by a CPU that is not the
# one aggregating it (often on the other socket). Per interface in the map, for its cores' CPUs
# C0..Ck-1 (in queue order):
#   IRQ affinity  the interface's queue interrupts (its PCI device's MSI-X vectors: the RX/TX
#                 queues and, on an RDMA NIC, the completion vectors phubd's cores' CQs use)
#                 round-robin over C0..Ck-1: /proc/irq/N/smp_affinity_list
#   XPS           TX queue j is used by the cores whose queue % (TX queues) == j:
#                 queues/tx-j/xps_cpus
#   RFS           each flow's receive processing runs on the CPU its reading thread last ran on
#                 (the pinned core): net.core.rps_sock_flow_entries and queues/rx-j/rps_flow_cnt
#                 (rps_sock_flow_entries is global: in a network namespace it is not there; set
#                 it in the root namespace)
#   RPS           where no interrupt steers (a virtual interface: veth, dummy) or the interface
#                 has fewer RX queues than cores: the receive work spread over C0..Ck-1,
#                 queues/rx-j/rps_cpus (RFS then picks the flow's own core among them)
#   busy polling  --busy-poll US: net.core.busy_poll and busy_read (with phubd --busy-poll-us)
# irqbalance moves IRQs back: stop it (the script says so when it runs). Nothing here outlives a
# reboot: run it from phubd's unit (ExecStartPre) or a boot script.
#
# Options: --apply (change, as root; default: dry run), --busy-poll US, --rfs-entries N
# (default 32768), --sysfs DIR and --procfs DIR (default /sys, /proc: the tests use a copy).
# Exit status: 0, or 2 for bad arguments or a map it cannot read.
set -euo pipefail

APPLY=0 BUSY_POLL="" RFS_ENTRIES=32768 SYSFS=/sys PROCFS=/proc MAP=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "tune-nics.sh: $*" >&2; exit 2; }
while (( $# )); do
  case $1 in
    --apply) APPLY=1; shift ;;
    --busy-poll) BUSY_POLL=${2:?--busy-poll needs microseconds}; shift 2 ;;
    --rfs-entries) RFS_ENTRIES=${2:?--rfs-entries needs a number}; shift 2 ;;
    --sysfs) SYSFS=${2:?}; shift 2 ;;
    --procfs) PROCFS=${2:?}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -) [[ -z $MAP ]] || die "one map file, please"; MAP=-; shift ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [[ -z $MAP ]] || die "one map file, please"; MAP=$1; shift ;;
  esac
done
[[ -n $MAP ]] || die "give the core map: phubd ... --print-core-map > map.tsv; $0 map.tsv (or - for stdin)"
[[ $MAP == - || -r $MAP ]] || die "cannot read the map '$MAP'"
[[ $RFS_ENTRIES =~ ^[0-9]+$ ]] || die "--rfs-entries takes a number"
[[ -z $BUSY_POLL || $BUSY_POLL =~ ^[0-9]+$ ]] || die "--busy-poll takes microseconds"

changes=0
# set FILE VALUE: write VALUE to FILE (apply) or say what would change; unchanged: quiet.
set_value() {
  local file=$1 value=$2 now=""
  if [[ ! -e $file ]]; then
    case $file in
      */rps_sock_flow_entries) echo "  skip $file: not there (inside a network namespace? it is global: set it in the root namespace)" ;;
      *) echo "  skip $file: not there" ;;
    esac
    return 0
  fi
  now=$(head -n 1 "$file" 2>/dev/null || true)
  # Masks compare without their commas and leading zeros (sysfs pads them to its CPU count).
  if [[ $now == "$value" || $(norm "$now") == "$(norm "$value")" ]]; then return 0; fi
  changes=$((changes + 1))
  if (( APPLY )); then
    if printf '%s\n' "$value" >"$file" 2>/dev/null; then
      echo "  set $file: $now -> $value"
    else
      echo "  FAILED $file: $now -> $value (root? a read-only setting on this driver?)"
    fi
  else
    echo "  would set $file: $now -> $value"
  fi
}

norm() { local v=${1//,/}; v=${v#"${v%%[!0]*}"}; echo "${v:-0}"; }

# mask CPU...: the hex mask sysfs's *_cpus files take (comma-separated 32-bit groups).
mask() {
  local cpu groups=() g i out=""
  for cpu in "$@"; do
    g=$((cpu / 32))
    while (( ${#groups[@]} <= g )); do groups+=(0); done
    groups[g]=$(( groups[g] | (1 << (cpu % 32)) ))
  done
  for (( i = ${#groups[@]} - 1; i >= 0; i-- )); do
    out+=$(printf '%08x' "${groups[i]}")
    (( i > 0 )) && out+=","
  done
  echo "${out:-0}"
}

# The map: interface -> its cores' CPUs in queue order.
declare -A cpus_of
header_seen=0
while IFS=$'\t' read -r core physical cpu node nic iface address rdma queue rest; do
  if [[ $core == core ]]; then header_seen=1; continue; fi
  [[ -z $core || $core == \#* ]] && continue
  [[ $core =~ ^[0-9]+$ && $cpu =~ ^[0-9]+$ && $queue =~ ^[0-9]+$ ]] ||
    die "map line '$core $physical $cpu ...' is not phubd --print-core-map's"
  [[ $iface == - || -z $iface ]] && { echo "core $core: NIC $nic has no interface name (an address): skipped"; continue; }
  cpus_of[$iface]+="$queue:$cpu "
done < <(if [[ $MAP == - ]]; then cat; else cat "$MAP"; fi)
(( header_seen )) || die "no header line: is '$MAP' phubd --print-core-map's output?"
(( ${#cpus_of[@]} )) || die "the map names no interface"

if [[ -d $PROCFS/1 ]] && grep -qs irqbalance "$PROCFS"/[0-9]*/comm; then
  echo "note: irqbalance is running and will move the IRQs set here: systemctl disable --now irqbalance"
fi
(( APPLY )) || echo "dry run: nothing is changed (--apply to change it)"

set_value "$PROCFS/sys/net/core/rps_sock_flow_entries" "$RFS_ENTRIES"
if [[ -n $BUSY_POLL ]]; then
  set_value "$PROCFS/sys/net/core/busy_poll" "$BUSY_POLL"
  set_value "$PROCFS/sys/net/core/busy_read" "$BUSY_POLL"
fi

for iface in $(printf '%s\n' "${!cpus_of[@]}" | sort); do
  # CPUs in queue order (queue 0 first), one per core.
  mapfile -t cpus < <(tr ' ' '\n' <<<"${cpus_of[$iface]}" | grep . | sort -t: -k1,1n | cut -d: -f2)
  dev=$SYSFS/class/net/$iface
  echo "$iface: cores on CPUs ${cpus[*]}"
  [[ -d $dev ]] || { echo "  skip: no $dev (run it on the PBox, in phubd's network namespace)"; continue; }
  mapfile -t rxq < <(ls -d "$dev"/queues/rx-* 2>/dev/null | sort -V)
  mapfile -t txq < <(ls -d "$dev"/queues/tx-* 2>/dev/null | sort -V)
  # IRQs: the PCI device's MSI-X vectors (a virtual interface has none).
  mapfile -t irqs < <(ls "$dev"/device/msi_irqs 2>/dev/null | sort -n)
  if (( ${#irqs[@]} )); then
    for (( j = 0; j < ${#irqs[@]}; j++ )); do
      set_value "$PROCFS/irq/${irqs[j]}/smp_affinity_list" "${cpus[j % ${#cpus[@]}]}"
    done
  else
    echo "  no MSI-X IRQs (a virtual interface): RPS and RFS steer in software"
  fi
  for (( j = 0; j < ${#txq[@]}; j++ )); do
    users=()
    for (( q = 0; q < ${#cpus[@]}; q++ )); do (( q % ${#txq[@]} == j )) && users+=("${cpus[q]}"); done
    (( ${#users[@]} )) && set_value "${txq[j]}/xps_cpus" "$(mask "${users[@]}")"
  done
  for (( j = 0; j < ${#rxq[@]}; j++ )); do
    set_value "${rxq[j]}/rps_flow_cnt" $(( RFS_ENTRIES / ${#rxq[@]} ))
    if (( ${#irqs[@]} == 0 || ${#rxq[@]} < ${#cpus[@]} )); then
      set_value "${rxq[j]}/rps_cpus" "$(mask "${cpus[@]}")"
    else
      set_value "${rxq[j]}/rps_cpus" "$(mask)"
    fi
  done
done
if (( APPLY )); then echo "$changes settings changed"; else echo "$changes settings would change"; fi
