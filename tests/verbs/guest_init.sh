#!/bin/busybox sh
# PID 1 of the soft-RoCE guest (run_in_guest.sh). Loads the modules, mounts the host's root
# read-only and the job's directory read-write (both over virtio-9p), chroots into the host's
# root and runs the job script there, writes its exit status next to it, and powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules/order); do insmod "/modules/$m" || echo "guest: insmod $m failed"; done

job=""
for arg in $(cat /proc/cmdline); do
  case $arg in phub.job=*) job=${arg#phub.job=} ;; esac
done
finish() { sync; poweroff -f; }

mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=loose,ro host /host ||
  { echo "guest: cannot mount the host's root"; finish; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap work "/host$job" ||
  { echo "guest: cannot mount the job directory $job"; finish; }
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs tmpfs /host/dev/shm
# A tmpfs /tmp, unless the job lives under the host's /tmp (it would hide it); TMPDIR points
# at a tmpfs under /run either way.
case $job in /tmp/*) ;; *) mount -t tmpfs tmpfs /host/tmp ;; esac
mount -t tmpfs tmpfs /host/run

chroot /host /bin/bash "$job/job.sh" < /dev/null > "/host$job/output" 2>&1
echo $? > "/host$job/status"
finish
