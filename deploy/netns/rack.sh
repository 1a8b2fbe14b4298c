#!/usr/bin/env bash
# rack.sh: an emulated rack on one machine. Every host is a network namespace, every host has
# one rate-limited link to a switch namespace holding a Linux bridge. --help says everything.
set -Eeuo pipefail

PREFIX=phub-
SW=${PREFIX}sw
BRIDGE=br0
SUBNET=10.77.0
PS_IP=${SUBNET}.100
# Management network: an unshaped bridge in the root namespace with one leg (mgmt0) in every
# host, for launcher control traffic only (mpirun's PMIx server lives in the root namespace).
MGMT_BRIDGE=${PREFIX}mgmt
MGMT_SUBNET=10.78.0
STATE_DIR=${PHUB_RACK_STATE_DIR:-/run/phub-rack}
STATE_FILE=${STATE_DIR}/topology
LOCK_FILE=${PHUB_RACK_LOCK:-/run/phub-rack.lock}
MAX_WORKERS=90   # worker i = 10.77.0.(10+i) must stay below the PS's .100
MAX_PS_HOSTS=90  # multips: PS host j = 10.77.0.(100+j), below the broadcast .255

usage() {
  cat <<'EOF'
rack.sh: an emulated rack of hosts on one machine (network namespaces + rate-limited veths)

USAGE
  rack.sh up --topology pbox|cloud|colocated --workers N [--rate 1gbit] [--delay 0ms]
             [--qdisc htb|tbf|tbf-nogso|none] [--burst BYTES] [--queue BYTES]
  rack.sh up --topology pbox --workers N --ps-nics K [--ps-nic-rate R] [same options]
  rack.sh up --topology multips --workers N --ps-hosts K [same options]
  rack.sh up --topology racks --racks R --workers N --uplink U [same options]
  rack.sh down
  rack.sh status
  rack.sh exec HOST -- CMD [ARGS...]        HOST = ps, w0, w1, ... (multips: ps0, ps1, ...)
  rack.sh --help

WHAT `up` BUILDS
  Namespaces phub-w0 .. phub-w{N-1} (worker hosts), phub-ps (the PS host, pbox and cloud
  only) or phub-ps0 .. phub-ps{K-1} (the PS hosts, multips only) and phub-sw (the switch: one
  Linux bridge br0, STP off). Each host gets one veth pair: `eth0` inside the host namespace,
  the other end (named after the host: w0, w1, ..., ps or ps0, ps1, ...) inside phub-sw,
  enslaved to br0. `lo` is up everywhere.

      phub-w0 [eth0 10.77.0.10] ==B== [w0]--+
      phub-w1 [eth0 10.77.0.11] ==B== [w1]--+-- br0 (phub-sw)
      ...                                   |
      phub-ps [eth0 10.77.0.100] ==P== [ps]-+

  Addresses: 10.77.0.0/24, PS = 10.77.0.100, worker i = 10.77.0.(10+i) (N <= 90);
  multips: PS host j = 10.77.0.(100+j) (K <= 90).
  Management: an unshaped bridge phub-mgmt (10.78.0.1/24) in the root namespace and a leg
  mgmt0 in every host (10.78.0.x, same x as on eth0), for launcher control traffic only
  (mpirun's PMIx server runs in the root namespace). Benchmarks send no data over it.

  Topologies (B = --rate):
    pbox       PS link P = N*B  (a balanced PBox: one NIC-worth per worker)
    cloud      PS link P = B    (the PS is an ordinary host)
    colocated  no PS host; N worker hosts with links B (each worker host also runs a shard)
    multips    K PS hosts ps0..ps{K-1}, each with a link of B, beside the N worker hosts
               (BytePS's setup: K ordinary CPU boxes share the model; needs --ps-hosts K)
    racks      racks of racks: R racks (--racks R), each a bridge br<r> with N/R workers
               (links B) and a PBox ps<r> (link N/R*B + U: a NIC-worth per worker of its rack
               and one for its uplink; --pbox-rate sets another); the rack bridges joined by a
               core bridge brc through one uplink of U each (--uplink U, shaped both ways):
               worker i is in rack i / (N/R). Oversubscription = (N/R)*B / U.

  Every link is shaped in BOTH directions: host egress by a qdisc on the host-side eth0, host
  ingress by a qdisc on the switch-side veth's egress (the switch port towards the host).

OPTIONS
  --topology T   pbox, cloud, colocated or multips (required)
  --workers N    number of worker hosts, 1..90 (required)
  --ps-hosts K   multips only (and required there): number of PS hosts, 1..90
  --ps-nics K    pbox and cloud: the PS host has K NICs (eth0 .. eth{K-1}, 1..8), each its own
                 link to the switch of P/K (--ps-nic-rate sets another), NIC k on subnet
                 10.77.k.0/24 as 10.77.k.100; every worker gets 10.77.k.(10+i) on its eth0 too,
                 so it reaches each PS NIC directly. The PS answers ARP only on the NIC that
                 holds the address asked for (arp_ignore=1), so each NIC carries its own
                 traffic. A balanced PBox with a NIC per socket (docs/operations.md).
  --ps-nic-rate R  with --ps-nics: each PS NIC's link (default P/K)
  --racks R      racks only (and required there): number of racks, 2..16; N a multiple of R
  --uplink U     racks only (and required there): each rack's uplink to the core, tc units
  --pbox-rate P  racks only: each PBox's link (default N/R*B + U)
  --rate R       per-worker link rate B, tc units: bit, kbit, mbit, gbit, tbit (SI, 1000-based,
                 decimals allowed: 2.5gbit). Default 1gbit.
  --delay D      one-way host-to-host delay (e.g. 0ms, 250us, 2ms). Added by netem at each
                 host's egress only, so host->host one way = D and RTT = 2*D. Needs sch_netem in
                 the kernel; `up` fails with a clear message if it is missing. Default 0ms (no
                 netem at all).
  --qdisc Q      how a link is shaped (default htb; see deploy/netns/README.md for figures):
                   htb        htb root, one class rate=ceil=R, burst=cburst=--burst, bfifo leaf
                              of --queue bytes. GSO/TSO stay on (64 KB super-packets).
                   tbf        tbf rate R burst --burst limit --queue. GSO/TSO stay on.
                   tbf-nogso  GSO/TSO/GRO off on every veth (MTU-size packets, more CPU), then
                              tbf rate R burst --burst limit --queue.
                   none       no shaping at all (to measure what the machine itself can move);
                              link_bits in the state file still says the nominal rate.
  --burst BYTES  token-bucket depth per shaped link. Default: max(256 KiB, 1 ms at the link
                 rate), i.e. at least four 64 KB GSO packets.
  --queue BYTES  queue limit per shaped link (the switch port buffer). Default: max(512 KiB,
                 10 ms at the link rate).

COMMANDS
  up      Removes whatever an earlier run left (as `down`), then builds the rack and writes the
          state file. Safe to run again: it always starts from a clean slate.
  down    Kills processes still running inside phub-* namespaces (TERM, then KILL after 2 s),
          deletes every phub-* namespace (which deletes their veths and the bridge), deletes
          any link named phub-* in the root namespace (none is ever created there), removes
          the state directory. Succeeds when nothing is there.
  status  Prints the state file, then each phub-* namespace's addresses, qdiscs and classes.
  exec    Runs CMD inside host HOST's namespace (`ip netns exec phub-HOST CMD...`); its exit
          status is CMD's.

STATE FILE
  ${PHUB_RACK_STATE_DIR:-/run/phub-rack}/topology, key=value lines (read by
  bench/topo/topology.py):
    topology=pbox  workers=N  rate=1gbit  rate_bits=1000000000  delay=0ms  qdisc=htb
    burst_bytes=...  queue_bytes=...  hosts=ps w0 w1 ...
    ip.<host>=10.77.0.x   link_bits.<host>=<bits/s of that host's link>   ns.<host>=phub-<host>
  --ps-nics K adds ps_nics=K, nic_bits.ps=<bits/s of each PS NIC> and ip.ps.nic<k>=10.77.k.100
  for k = 0..K-1 (link_bits.ps stays the PS's total).
  multips adds ps_hosts=K after workers=N, and its hosts are ps0 .. ps{K-1} w0 .. w{N-1}.
  racks adds ps_hosts=R racks=R uplink=U uplink_bits=... and rack.<host>=<r> for every host.

ENVIRONMENT
  PHUB_RACK_STATE_DIR   state directory (default /run/phub-rack)
  PHUB_RACK_LOCK        lock file serialising up/down (default /run/phub-rack.lock)

Needs root, iproute2 (ip, tc); ethtool for --qdisc tbf-nogso. Touches only the phub-*
namespaces it creates: no root-namespace interface, route or sysctl is changed.
EOF
}

die() { echo "rack.sh: $*" >&2; exit 1; }
log() { echo "rack.sh: $*" >&2; }

need_root() {
  [[ $(id -u) -eq 0 ]] || die "must run as root"
  command -v ip >/dev/null || die "ip (iproute2) not found: apt-get install -y iproute2"
  command -v tc >/dev/null || die "tc (iproute2) not found: apt-get install -y iproute2"
}

take_lock() {
  if command -v flock >/dev/null; then
    exec 9>"$LOCK_FILE"
    flock -w 60 9 || die "could not lock $LOCK_FILE within 60 s (another rack.sh running?)"
  fi
}

# "2.5gbit" -> 2500000000 (integer bits/s)
rate_to_bits() {
  local r=${1,,}
  [[ $r =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit)$ ]] ||
    die "bad rate '$1' (examples: 100mbit, 1gbit, 2.5gbit)"
  local num=${BASH_REMATCH[1]} mult
  case ${BASH_REMATCH[3]} in
    bit) mult=1 ;; kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;;
    tbit) mult=1000000000000 ;;
  esac
  awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}

# "0ms" / "0" / "250us" -> microseconds
delay_to_us() {
  local d=${1,,}
  [[ $d =~ ^([0-9]+(\.[0-9]+)?)(us|ms|s)?$ ]] || die "bad delay '$1' (examples: 0ms, 250us, 2ms)"
  local num=${BASH_REMATCH[1]} mult
  case ${BASH_REMATCH[3]:-ms} in us) mult=1 ;; ms) mult=1000 ;; s) mult=1000000 ;; esac
  awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}

# reach NS IP: true when IP answers from inside NS. ping when installed, else a TCP connect to
# port 9 (discard): "connection refused" also proves the host is there.
reach() {
  local ns=$1 ip=$2 err
  if command -v ping >/dev/null; then
    ip netns exec "$ns" ping -c1 -W1 -q "$ip" >/dev/null 2>&1
  else
    err=$(ip netns exec "$ns" timeout 1 bash -c "exec 3<>/dev/tcp/$ip/9" 2>&1) && return 0
    [[ $err == *refused* ]]
  fi
}

max() { if (( $1 > $2 )); then echo "$1"; else echo "$2"; fi; }

rack_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}" || true; }

cmd_down() {
  local nss ns pids any
  nss=$(rack_namespaces)
  if [[ -n $nss ]]; then
    any=0
    for ns in $nss; do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      if [[ -n $pids ]]; then
        log "stopping processes left in $ns:" "${pids//$'\n'/ }"
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null || true
        any=1
      fi
    done
    if (( any )); then
      for _ in $(seq 20); do
        pids=""
        for ns in $nss; do pids+=" $(ip netns pids "$ns" 2>/dev/null || true)"; done
        [[ -z ${pids// /} ]] && break
        sleep 0.1
      done
      # shellcheck disable=SC2086
      [[ -n ${pids// /} ]] && { log "killing" $pids; kill -KILL $pids 2>/dev/null || true; }
    fi
    for ns in $nss; do
      ip netns del "$ns" 2>/dev/null || log "warning: could not delete namespace $ns"
    done
  fi
  # The management bridge and its host legs (phub-mgmt, phub-m<host>) are the only links in
  # the root namespace; remove every phub-* link there.
  local l
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${PREFIX}" || true); do
    ip link del "$l" 2>/dev/null || true
  done
  rm -rf "$STATE_DIR"
  local left
  left=$(rack_namespaces)
  [[ -z $left ]] || die "namespaces still present after down: $left"
}

# shape NS DEV RATE_BITS  (egress of DEV inside NS)
shape() {
  local ns=$1 dev=$2 bits=$3 with_delay=$4
  local bytes_per_s=$(( bits / 8 ))
  local burst=${BURST:-$(max 262144 $(( bytes_per_s / 1000 )))}
  local queue=${QUEUE:-$(max 524288 $(( bytes_per_s / 100 )))}
  local leaf
  case $QDISC in
    none)
      (( with_delay )) && (( DELAY_US > 0 )) && tc -n "$ns" qdisc add dev "$dev" root netem \
        delay "${DELAY_US}us" limit $(( queue / 1500 + 1000 ))
      return 0
      ;;
    htb)
      # The default, chosen by measurement (deploy/netns/README.md): 100 % of the rate on the
      # wire with GSO kept on, whatever the burst (htb sends a 64 KB GSO packet into token
      # debt where tbf with a smaller bucket has to segment or drop it).
      tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 1
      # quantum only matters between sibling classes; set it to avoid the r2q warning.
      tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb rate "${bits}bit" \
        ceil "${bits}bit" burst "$burst" cburst "$burst" quantum 65536
      leaf="parent 1:1 handle 10:"
      ;;
    tbf|tbf-nogso)
      tc -n "$ns" qdisc add dev "$dev" root handle 1: tbf rate "${bits}bit" burst "$burst" \
        limit "$queue"
      leaf="parent 1:1 handle 10:"
      ;;
  esac
  if (( with_delay )) && (( DELAY_US > 0 )); then
    # shellcheck disable=SC2086
    tc -n "$ns" qdisc add dev "$dev" $leaf netem delay "${DELAY_US}us" \
      limit $(( queue / 1500 + 1000 ))
  elif [[ $QDISC == htb ]]; then
    # shellcheck disable=SC2086
    tc -n "$ns" qdisc add dev "$dev" $leaf bfifo limit "$queue"
  fi
}

cmd_up() {
  local topology="" workers="" rate=1gbit delay=0ms ps_hosts="" racks="" uplink="" pbox_rate=""
  local pbox_bits="" ps_nics=1 ps_nic_rate=""
  QDISC=htb BURST="" QUEUE=""
  while (( $# )); do
    case $1 in
      --topology) topology=${2:?--topology needs a value}; shift 2 ;;
      --workers) workers=${2:?--workers needs a value}; shift 2 ;;
      --ps-hosts) ps_hosts=${2:?--ps-hosts needs a value}; shift 2 ;;
      --ps-nics) ps_nics=${2:?--ps-nics needs a value}; shift 2 ;;
      --ps-nic-rate) ps_nic_rate=${2:?--ps-nic-rate needs a value}; shift 2 ;;
      --racks) racks=${2:?--racks needs a value}; shift 2 ;;
      --uplink) uplink=${2:?--uplink needs a value}; shift 2 ;;
      --pbox-rate) pbox_rate=${2:?--pbox-rate needs a value}; shift 2 ;;
      --rate) rate=${2:?--rate needs a value}; shift 2 ;;
      --delay) delay=${2:?--delay needs a value}; shift 2 ;;
      --qdisc) QDISC=${2:?--qdisc needs a value}; shift 2 ;;
      --burst) BURST=${2:?--burst needs a value}; shift 2 ;;
      --queue) QUEUE=${2:?--queue needs a value}; shift 2 ;;
      -h|--help) usage; exit 0 ;;
      *) die "up: unknown argument '$1' (see --help)" ;;
    esac
  done
  case $topology in pbox|cloud|colocated|multips|racks) ;; "") die "up: --topology is required" ;;
    *) die "up: --topology must be pbox, cloud, colocated, multips or racks, not '$topology'" ;; esac
  if ! [[ $workers =~ ^[0-9]+$ ]] || (( workers < 1 || workers > MAX_WORKERS )); then
    die "up: --workers must be 1..$MAX_WORKERS"
  fi
  if [[ $topology == multips ]]; then
    [[ -n $ps_hosts ]] || die "up: --topology multips needs --ps-hosts K"
    if ! [[ $ps_hosts =~ ^[0-9]+$ ]] || (( ps_hosts < 1 || ps_hosts > MAX_PS_HOSTS )); then
      die "up: --ps-hosts must be 1..$MAX_PS_HOSTS"
    fi
  elif [[ -n $ps_hosts ]]; then
    die "up: --ps-hosts is for --topology multips only"
  fi
  if ! [[ $ps_nics =~ ^[0-9]+$ ]] || (( ps_nics < 1 || ps_nics > 8 )); then
    die "up: --ps-nics must be 1..8"
  fi
  if (( ps_nics > 1 )) && [[ $topology != pbox && $topology != cloud ]]; then
    die "up: --ps-nics is for --topology pbox and cloud (one PS host)"
  fi
  [[ -z $ps_nic_rate ]] || (( ps_nics > 1 )) || die "up: --ps-nic-rate goes with --ps-nics K > 1"
  local uplink_bits="" per_rack=""
  if [[ $topology == racks ]]; then
    [[ -n $racks && -n $uplink ]] || die "up: --topology racks needs --racks R and --uplink U"
    if ! [[ $racks =~ ^[0-9]+$ ]] || (( racks < 2 || racks > 16 )); then
      die "up: --racks must be 2..16"
    fi
    (( workers % racks == 0 )) || die "up: --workers $workers is not a multiple of --racks $racks"
    per_rack=$(( workers / racks ))
    uplink_bits=$(rate_to_bits "$uplink")
    [[ -z $pbox_rate ]] || pbox_bits=$(rate_to_bits "$pbox_rate")
    ps_hosts=$racks
  elif [[ -n $racks || -n $uplink || -n $pbox_rate ]]; then
    die "up: --racks, --uplink and --pbox-rate are for --topology racks only"
  fi
  case $QDISC in htb|tbf|tbf-nogso|none) ;; *) die "up: --qdisc must be htb, tbf, tbf-nogso or none" ;; esac
  [[ -z $BURST || $BURST =~ ^[0-9]+$ ]] || die "up: --burst takes bytes (an integer)"
  [[ -z $QUEUE || $QUEUE =~ ^[0-9]+$ ]] || die "up: --queue takes bytes (an integer)"
  local rate_bits
  rate_bits=$(rate_to_bits "$rate")
  (( rate_bits >= 8000 )) || die "up: --rate too small"
  DELAY_US=$(delay_to_us "$delay")
  if [[ $QDISC == tbf-nogso ]]; then
    command -v ethtool >/dev/null || die "--qdisc tbf-nogso needs ethtool: apt-get install -y ethtool"
  fi

  cmd_down

  local hosts=() i h
  case $topology in
    pbox|cloud) hosts+=(ps) ;;
    multips|racks) for (( i = 0; i < ps_hosts; i++ )); do hosts+=("ps$i"); done ;;
  esac
  for (( i = 0; i < workers; i++ )); do hosts+=("w$i"); done

  # From here on a failure leaves a half-built rack: tear it down before exiting.
  trap 'log "up failed; cleaning up"; cmd_down || true' ERR

  ip netns add "$SW"
  ip -n "$SW" link set lo up
  ip -n "$SW" link add "$BRIDGE" type bridge stp_state 0 forward_delay 0
  ip -n "$SW" link set "$BRIDGE" up
  # Host namespaces: no IPv6 (no DAD/RS chatter on the links).
  ip netns exec "$SW" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
  if [[ $topology == racks ]]; then
    # A bridge per rack and the core bridge brc, joined by one shaped uplink per rack (a veth
    # pair inside the switch namespace: up<r> on br<r>, co<r> on brc). A tree: STP stays off.
    ip -n "$SW" link add brc type bridge stp_state 0 forward_delay 0
    ip -n "$SW" link set brc up
    for (( i = 0; i < racks; i++ )); do
      if (( i > 0 )); then  # br0 ($BRIDGE) is rack 0's
        ip -n "$SW" link add "br$i" type bridge stp_state 0 forward_delay 0
        ip -n "$SW" link set "br$i" up
      fi
      ip -n "$SW" link add "up$i" type veth peer name "co$i"
      ip -n "$SW" link set "up$i" master "br$i"
      ip -n "$SW" link set "co$i" master brc
      shape "$SW" "up$i" "$uplink_bits" 0   # rack -> core
      shape "$SW" "co$i" "$uplink_bits" 0   # core -> rack
      ip -n "$SW" link set "up$i" up
      ip -n "$SW" link set "co$i" up
    done
  fi
  ip link add "$MGMT_BRIDGE" type bridge stp_state 0 forward_delay 0
  ip addr add "${MGMT_SUBNET}.1/24" dev "$MGMT_BRIDGE"
  ip link set "$MGMT_BRIDGE" up

  if (( DELAY_US > 0 )); then
    # Probe for netem: try it on the bridge, then remove it.
    if ! tc -n "$SW" qdisc add dev "$BRIDGE" root netem delay 1us 2>/dev/null; then
      cmd_down
      die "up: --delay $delay needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM); use --delay 0ms"
    fi
    tc -n "$SW" qdisc del dev "$BRIDGE" root
  fi

  local state
  state="topology=$topology
mgmt_bridge=$MGMT_BRIDGE
mgmt_subnet=${MGMT_SUBNET}.0/24
data_subnet=${SUBNET}.0/24
workers=$workers
${ps_hosts:+ps_hosts=$ps_hosts
}${racks:+racks=$racks
uplink=$uplink
uplink_bits=$uplink_bits
}rate=$rate
rate_bits=$rate_bits
delay=$delay
delay_us=$DELAY_US
qdisc=$QDISC
burst_bytes=${BURST:-auto}
queue_bytes=${QUEUE:-auto}
hosts=${hosts[*]}
"
  for h in "${hosts[@]}"; do
    local ns=${PREFIX}$h ip bits
    if [[ $h == ps ]]; then
      ip=$PS_IP
      if [[ $topology == pbox ]]; then bits=$(( rate_bits * workers )); else bits=$rate_bits; fi
    elif [[ $h == ps[0-9]* ]]; then
      ip=${SUBNET}.$(( 100 + ${h#ps} ))   # multips: PS host j, an ordinary box with link B
      bits=$rate_bits
      # racks: rack j's PBox, balanced: a NIC-worth per worker of its rack and one for its
      # uplink's share of the core (--pbox-rate overrides)
      [[ $topology == racks ]] && bits=${pbox_bits:-$(( rate_bits * per_rack + uplink_bits ))}
    else
      ip=${SUBNET}.$(( 10 + ${h#w} ))
      bits=$rate_bits
    fi
    ip netns add "$ns"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
    ip -n "$ns" link set lo up
    ip link add eth0 netns "$ns" type veth peer name "$h" netns "$SW"
    local bridge=$BRIDGE rack_of=""
    if [[ $topology == racks ]]; then
      if [[ $h == ps* ]]; then rack_of=${h#ps}; else rack_of=$(( ${h#w} / per_rack )); fi
      bridge=br$rack_of
    fi
    ip -n "$SW" link set "$h" master "$bridge"
    if [[ $QDISC == tbf-nogso ]]; then
      ip netns exec "$ns" ethtool -K eth0 gso off tso off gro off >/dev/null 2>&1 || true
      ip netns exec "$SW" ethtool -K "$h" gso off tso off gro off >/dev/null 2>&1 || true
    fi
    local nic_bits=$bits
    if [[ $h == ps ]] && (( ps_nics > 1 )); then
      nic_bits=$(( bits / ps_nics ))
      [[ -z $ps_nic_rate ]] || nic_bits=$(rate_to_bits "$ps_nic_rate")
      # Answer ARP only on the NIC holding the address asked for, announce from it alone: else
      # every NIC on the bridge answers for all and one of them takes every NIC's traffic.
      ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
    fi
    ip -n "$ns" addr add "$ip/24" dev eth0
    shape "$ns" eth0 "$nic_bits" 1        # host egress (+ netem delay)
    shape "$SW" "$h" "$nic_bits" 0        # host ingress = switch port egress
    ip -n "$SW" link set "$h" up
    ip -n "$ns" link set eth0 up
    if [[ $h == ps ]] && (( ps_nics > 1 )); then
      local k
      for (( k = 1; k < ps_nics; k++ )); do
        ip link add "eth$k" netns "$ns" type veth peer name "psn$k" netns "$SW"
        ip -n "$SW" link set "psn$k" master "$BRIDGE"
        if [[ $QDISC == tbf-nogso ]]; then
          ip netns exec "$ns" ethtool -K "eth$k" gso off tso off gro off >/dev/null 2>&1 || true
          ip netns exec "$SW" ethtool -K "psn$k" gso off tso off gro off >/dev/null 2>&1 || true
        fi
        ip -n "$ns" addr add "${SUBNET%.*}.$k.100/24" dev "eth$k"
        shape "$ns" "eth$k" "$nic_bits" 1
        shape "$SW" "psn$k" "$nic_bits" 0
        ip -n "$SW" link set "psn$k" up
        ip -n "$ns" link set "eth$k" up
      done
      state+="ps_nics=$ps_nics
nic_bits.ps=$nic_bits
"
      for (( k = 0; k < ps_nics; k++ )); do state+="ip.ps.nic$k=${SUBNET%.*}.$k.100
"; done
    elif [[ $h == w* ]] && (( ps_nics > 1 )); then
      # The worker reaches PS NIC k on its subnet, through its one link.
      local k
      for (( k = 1; k < ps_nics; k++ )); do
        ip -n "$ns" addr add "${SUBNET%.*}.$k.${ip##*.}/24" dev eth0
      done
    fi
    ip link add mgmt0 netns "$ns" type veth peer name "${PREFIX}m$h"
    ip link set "${PREFIX}m$h" master "$MGMT_BRIDGE" up
    ip -n "$ns" addr add "${MGMT_SUBNET}.${ip##*.}/24" dev mgmt0
    ip -n "$ns" link set mgmt0 up
    state+="ip.$h=$ip
link_bits.$h=$bits
ns.$h=$ns
${rack_of:+rack.$h=$rack_of
}"
  done
  trap - ERR

  mkdir -p "$STATE_DIR"
  printf '%s' "$state" >"$STATE_FILE.tmp"
  mv "$STATE_FILE.tmp" "$STATE_FILE"

  # Wait until every host reaches the bridge (first ping also fills the ARP tables).
  local first=${hosts[0]} target ok
  for h in "${hosts[@]:1}"; do
    target=$(awk -F= -v k="ip.$h" '$1 == k {print $2}' "$STATE_FILE")
    ok=0
    for _ in $(seq 50); do
      if reach "${PREFIX}$first" "$target"; then ok=1; break; fi
      sleep 0.1
    done
    (( ok )) || log "warning: $first cannot ping $h ($target) yet"
  done
  local pslink=none
  [[ $topology == pbox ]] && pslink="N*B"
  [[ $topology == cloud ]] && pslink="B"
  if (( ps_nics > 1 )); then pslink+=" over $ps_nics NICs of ${ps_nic_rate:-$pslink/$ps_nics} each"; fi
  [[ $topology == multips ]] && pslink="B on each of $ps_hosts PS hosts"
  [[ $topology == racks ]] && pslink="${pbox_rate:-$per_rack*B+U} on each of $racks racks' PBoxes, uplinks $uplink"
  log "up: $topology, $workers workers, B=$rate, PS link $pslink, qdisc $QDISC, delay $delay;" \
      "state in $STATE_FILE"
}

cmd_status() {
  if [[ -f $STATE_FILE ]]; then
    echo "== state ($STATE_FILE)"
    cat "$STATE_FILE"
  else
    echo "== no state file ($STATE_FILE): rack is down"
  fi
  local ns
  for ns in $(rack_namespaces); do
    echo "== $ns"
    ip -n "$ns" -br addr show | sed 's/^/  addr   /'
    tc -n "$ns" qdisc show | grep -v "qdisc noqueue" | sed 's/^/  qdisc  /' || true
    local dev
    for dev in $(ip -n "$ns" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
      tc -n "$ns" class show dev "$dev" | sed "s/^/  class  $dev: /"
    done
  done
}

cmd_exec() {
  (( $# >= 1 )) || die "exec: usage: rack.sh exec HOST -- CMD [ARGS...]"
  local host=$1; shift
  [[ ${1:-} == -- ]] && shift
  (( $# >= 1 )) || die "exec: no command given"
  local ns=${PREFIX}${host}
  rack_namespaces | grep -x "$ns" >/dev/null || die "exec: no namespace $ns (is the rack up? hosts: $(rack_namespaces | sed "s/^$PREFIX//" | grep -v '^sw$' | tr '\n' ' '))"
  exec ip netns exec "$ns" "$@"
}

main() {
  (( $# )) || { usage; exit 2; }
  local cmd=$1; shift
  case $cmd in
    -h|--help|help) usage ;;
    up) need_root; take_lock; cmd_up "$@" ;;
    down) need_root; take_lock; cmd_down; log "down: no phub-* namespace left" ;;
    status) need_root; cmd_status ;;
    exec) need_root; cmd_exec "$@" ;;
    *) die "unknown command '$cmd' (see --help)" ;;
  esac
}

main "$@"
