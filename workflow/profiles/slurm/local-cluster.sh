#!/usr/bin/env bash
# A throwaway single-node SLURM cluster on this machine, to try the slurm profile without a cluster.
#
#   local-cluster.sh install   # apt-get the Debian packages (root; Debian or Ubuntu)
#   local-cluster.sh start     # start munged, slurmctld and slurmd; prints the SLURM_CONF to export
#   local-cluster.sh stop      # cancel every job, stop the three daemons this script started
#   local-cluster.sh status    # sinfo and squeue
#
# Everything lives under $TILESWEEP_SLURM_DIR (default /tmp/tilesweep-slurm): its own munge key
# and socket, slurm.conf, state, logs. Nothing under /etc is changed. Run as root. The node is
# `localhost` with this machine's CPUs, 80% of its memory and $TILESWEEP_SLURM_NODE_GPUS fake
# GPUs (gres entries without hardware) so the profile's GPU requests can be scheduled. Partitions
# are named like the profile's defaults unless $TILESWEEP_SLURM_CPU_PARTITION and
# $TILESWEEP_SLURM_GPU_PARTITION say otherwise; both hold the one node.
set -euo pipefail

DIR=${TILESWEEP_SLURM_DIR:-/tmp/tilesweep-slurm}
CPU_PARTITION=${TILESWEEP_SLURM_CPU_PARTITION:-cpu}
GPU_PARTITION=${TILESWEEP_SLURM_GPU_PARTITION:-gpu}
NODE_GPUS=${TILESWEEP_SLURM_NODE_GPUS:-8}
PORT=${TILESWEEP_SLURM_PORT:-6817} # slurmctld's port; slurmd listens on the next one
PACKAGES=(slurmctld slurmd slurm-client munge)
export SLURM_CONF="$DIR/slurm.conf"

die() {
	echo "local-cluster: $*" >&2
	exit 1
}

# Print the pid recorded in a pid file when that process still runs the named program.
live_pid() {
	local file=$1 name=$2 pid
	[[ -s $file ]] || return 1
	pid=$(<"$file")
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/comm ]] || return 1
	[[ $(</proc/"$pid"/comm) == "$name" ]] || return 1
	echo "$pid"
}

cmd_install() {
	[[ $(id -u) == 0 ]] || die "install needs root"
	command -v apt-get >/dev/null || die "install needs apt-get (Debian or Ubuntu)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${PACKAGES[@]}" ||
		{ apt-get -o DPkg::Lock::Timeout=300 update -q &&
			apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${PACKAGES[@]}"; }
}

write_conf() {
	local mem gpus=""
	mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
	if ((NODE_GPUS > 0)); then
		gpus="Gres=gpu:$NODE_GPUS"
		mkdir -p "$DIR/dev"
		# Character devices that look like GPUs to slurmd (copies of /dev/null); plain files
		# work too, with a warning per file.
		for ((i = 0; i < NODE_GPUS; i++)); do
			[[ -e $DIR/dev/gpu$i ]] || mknod "$DIR/dev/gpu$i" c 1 3 2>/dev/null || touch "$DIR/dev/gpu$i"
		done
		printf 'AutoDetect=off\nNodeName=localhost Name=gpu File=%s/dev/gpu[0-%d]\n' \
			"$DIR" "$((NODE_GPUS - 1))" >"$DIR/gres.conf"
	fi
	cat >"$SLURM_CONF" <<EOF
# Written by local-cluster.sh: one node on loopback, no accounting database, no cgroups.
ClusterName=tilesweep
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=300
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem $gpus State=UNKNOWN
PartitionName=$CPU_PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
	if [[ $GPU_PARTITION != "$CPU_PARTITION" ]]; then
		echo "PartitionName=$GPU_PARTITION Nodes=localhost MaxTime=INFINITE State=UP" >>"$SLURM_CONF"
	fi
}

start_munge() {
	local m=$DIR/munge
	live_pid "$m/munged.pid" munged >/dev/null && return
	mkdir -p "$m"
	chown munge:munge "$m"
	chmod 755 "$m" # munged wants its socket's folder searchable by all
	[[ -s $m/munge.key ]] || runuser -u munge -- mungekey --create --keyfile="$m/munge.key"
	runuser -u munge -- munged --socket="$m/munge.socket" --key-file="$m/munge.key" \
		--pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/munged.seed" ||
		die "munged did not start: $(tail -n 3 "$m/munged.log" 2>/dev/null)"
}

wait_idle() {
	local state=""
	for _ in $(seq 60); do
		state=$(sinfo -h -N -n localhost -o %T 2>/dev/null | head -n 1 || true)
		[[ $state == idle || $state == mixed || $state == allocated ]] && return
		sleep 0.5
	done
	echo "--- slurmctld.log" >&2
	tail -n 20 "$DIR/log/slurmctld.log" >&2 || true
	echo "--- slurmd.log" >&2
	tail -n 20 "$DIR/log/slurmd.log" >&2 || true
	die "node localhost is '${state:-unknown}', not idle, after 30 s"
}

cmd_start() {
	[[ $(id -u) == 0 ]] || die "start needs root (slurmd runs jobs as their users)"
	for tool in munged mungekey slurmctld slurmd sbatch squeue sinfo; do
		command -v "$tool" >/dev/null || die "$tool not found: run '$0 install' first"
	done
	if live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null; then
		die "a cluster already runs from $DIR: '$0 stop' first"
	fi
	rm -rf "$DIR/state" "$DIR/spool"
	mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
	write_conf
	start_munge
	slurmctld -i || die "slurmctld did not start: $(tail -n 5 "$DIR/log/slurmctld.log")"
	slurmd -N localhost || die "slurmd did not start: $(tail -n 5 "$DIR/log/slurmd.log")"
	wait_idle
	echo "export SLURM_CONF=$SLURM_CONF"
}

stop_daemon() {
	local file=$1 name=$2 pid
	pid=$(live_pid "$file" "$name") || return 0
	kill "$pid"
	for _ in $(seq 50); do
		[[ -d /proc/$pid ]] || return 0
		sleep 0.2
	done
	kill -9 "$pid" 2>/dev/null || true
}

cmd_stop() {
	if live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null; then
		scancel --full --quiet --user="$(id -un)" 2>/dev/null || true
		for _ in $(seq 50); do
			[[ -z $(squeue -h -t PD,R,CG -o %i 2>/dev/null) ]] && break
			sleep 0.2
		done
	fi
	stop_daemon "$DIR/slurmd.pid" slurmd
	stop_daemon "$DIR/slurmctld.pid" slurmctld
	stop_daemon "$DIR/munge/munged.pid" munged
}

cmd_status() {
	sinfo
	squeue --states=all
}

case ${1:-} in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
	sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
