#!/usr/bin/env bash
# Builds (once) the soft-RoCE guest that run_in_guest.sh boots: Debian's own kernel (the .deb is
# downloaded and unpacked here, never installed on the host) and a busybox initramfs holding
# the modules rxe needs and guest_init.sh as /init. Result: $PHUB_GUEST_CACHE/{vmlinux,initrd}.
#
#   tests/verbs/guest_image.sh            # builds if missing; prints the cache dir
#   PHUB_GUEST_REBUILD=1 tests/verbs/guest_image.sh
#
# Needs root the first time (apt-get). Exit 77 when it cannot build here (not root, no apt).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${PHUB_GUEST_CACHE:-/var/cache/phub-rxe-guest}
# crc32_generic: rdma_rxe asks the crypto API for crc32 at run time and the guest has no
# modprobe to load it on demand. dummy: the netdev under rxe0 (rdma_cm and RoCE need an
# address that is not on lo).
MODULES=(virtio_pci 9pnet_virtio 9p dummy crc32_generic ib_uverbs rdma_rxe)
HOST_PACKAGES=(qemu-system-x86 kmod xz-utils cpio iproute2 ibverbs-providers ibverbs-utils perftest)

say() { echo "guest_image: $*" >&2; }
skip() { say "cannot build the guest here: $*"; exit 77; }

ready() { [[ -s $CACHE/vmlinux && -s $CACHE/initrd && -s $CACHE/kernel.txt ]]; }
if [[ ${PHUB_GUEST_REBUILD:-0} != 1 ]] && ready; then echo "$CACHE"; exit 0; fi
[[ $(id -u) == 0 ]] || skip "the first build needs root (apt-get); run it once as root"
command -v apt-get >/dev/null || skip "no apt-get (a Debian host is needed)"

missing=()
for p in "${HOST_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null || skip "apt-get install failed"
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9  # one builder at a time (ctest -j)
if [[ ${PHUB_GUEST_REBUILD:-0} != 1 ]] && ready; then echo "$CACHE"; exit 0; fi

# The kernel linux-image-amd64 points at today, and a static busybox for /init.
kernel_pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [[ -z $kernel_pkg ]]; then
  apt-get update -qq
  kernel_pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[[ -n $kernel_pkg ]] || skip "apt knows no linux-image-amd64"
kver=${kernel_pkg#linux-image-}
work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "downloading $kernel_pkg and busybox-static"
(cd "$work" && apt-get download -qq -o APT::Sandbox::User=root "$kernel_pkg" busybox-static) ||
  skip "apt-get download failed (no network?)"
dpkg -x "$work/${kernel_pkg}"_*.deb "$work/kernel"
dpkg -x "$work"/busybox-static_*.deb "$work/busybox"
depmod -b "$work/kernel" "$kver"  # the .deb ships no modules.dep

# vmlinuz is a self-decompressing bzImage; QEMU boots the bare ELF through its PVH note, which
# saves the decompression (seconds under TCG emulation).
vmlinuz="$work/kernel/boot/vmlinuz-$kver"
offset=$(LC_ALL=C grep -obUaP -m1 '\xfd7zXZ\x00' "$vmlinuz" | cut -d: -f1)
[[ -n $offset ]] || { say "no xz payload in $vmlinuz"; exit 1; }
tail -c +$((offset + 1)) "$vmlinuz" | xz -dc --single-stream > "$work/vmlinux" 2>/dev/null || true
[[ $(head -c 4 "$work/vmlinux" | tail -c 3) == ELF ]] || { say "could not unpack vmlinux"; exit 1; }

# The initramfs: busybox, /init, and the modules with their dependencies in load order.
root="$work/initrd-root"
mkdir -p "$root"/{bin,dev,proc,sys,host,modules}
cp "$work/busybox/bin/busybox" "$root/bin/busybox"
cp "$HERE/guest_init.sh" "$root/init"
chmod 755 "$root/init"
: > "$root/modules/order"
for module in "${MODULES[@]}"; do
  modprobe -d "$work/kernel" -S "$kver" --show-depends "$module" | while read -r verb path _; do
    [[ $verb == insmod ]] || continue
    name=$(basename "$path")
    grep -qx "$name" "$root/modules/order" && continue
    cp "$path" "$root/modules/$name"
    echo "$name" >> "$root/modules/order"
  done
done
(cd "$root" && find . | cpio -o -H newc --quiet) > "$work/initrd"

mv "$work/vmlinux" "$CACHE/vmlinux"
mv "$work/initrd" "$CACHE/initrd"
echo "$kernel_pkg" > "$CACHE/kernel.txt"
say "built $CACHE ($kernel_pkg, $(wc -l < "$root/modules/order") modules)"
echo "$CACHE"
