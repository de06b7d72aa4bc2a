#!/usr/bin/env bash
# A throwaway single-node SLURM cluster on this machine, to try the slurm profile without a cluster.
#
#   local-cluster.sh install   # apt-get the Debian packages (root; Debian or Ubuntu)
#   local-cluster.sh start     # start munged, slurmctld and slurmd; prints how to run the sweep
#   local-cluster.sh stop      # cancel every job, stop the daemons this script started
#   local-cluster.sh status    # sinfo and squeue
#
# Run as root. State, logs and the config live under $TILESWEEP_SLURM_DIR (default
# /tmp/tilesweep-slurm); nothing under /etc changes. slurmd runs "configless": it fetches the
# config from slurmctld and publishes it under /run/slurm/conf, where every client finds it
# (the plugin's job steps drop $SLURM_CONF). munged uses its default socket under /run/munge
# (a munged that already answers there is reused and left running).
# The node is `localhost`: this machine's CPUs, 80% of its memory and $TILESWEEP_SLURM_NODE_GPUS
# fake GPUs (device entries with no hardware behind them, default min(CPUs, 8)) so that the
# profile's GPU requests can be scheduled. Two partitions hold it, named like the profile's
# defaults: $TILESWEEP_SLURM_CPU_PARTITION (cpu, the default one) and
# $TILESWEEP_SLURM_GPU_PARTITION (gpu).
set -euo pipefail

DIR=${TILESWEEP_SLURM_DIR:-/tmp/tilesweep-slurm}
CPUS=$(nproc)
NODE_GPUS=${TILESWEEP_SLURM_NODE_GPUS:-$((CPUS < 8 ? CPUS : 8))}
CPU_PARTITION=${TILESWEEP_SLURM_CPU_PARTITION:-cpu}
GPU_PARTITION=${TILESWEEP_SLURM_GPU_PARTITION:-gpu}
PORT=${TILESWEEP_SLURM_PORT:-6817} # slurmctld's port; slurmd listens on the next one
PACKAGES=(slurmctld slurmd slurm-client munge)
CONF=$DIR/slurm.conf

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
	local apt=(apt-get -q -o DPkg::Lock::Timeout=300)
	export DEBIAN_FRONTEND=noninteractive
	"${apt[@]}" install -y --no-install-recommends "${PACKAGES[@]}" ||
		{ "${apt[@]}" update && "${apt[@]}" install -y --no-install-recommends "${PACKAGES[@]}"; }
}

write_conf() {
	local mem gres=""
	mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
	if ((NODE_GPUS > 0)); then
		gres="Gres=gpu:$NODE_GPUS"
		mkdir -p "$DIR/dev"
		# Character devices (copies of /dev/null) stand in for GPUs; plain files work too,
		# with a warning from slurmd for each.
		for ((i = 0; i < NODE_GPUS; i++)); do
			[[ -e $DIR/dev/gpu$i ]] || mknod "$DIR/dev/gpu$i" c 1 3 2>/dev/null || touch "$DIR/dev/gpu$i"
		done
		printf 'AutoDetect=off\nNodeName=localhost Name=gpu File=%s/dev/gpu[0-%d]\n' \
			"$DIR" "$((NODE_GPUS - 1))" >"$DIR/gres.conf"
	fi
	cat >"$CONF" <<EOF
# Written by local-cluster.sh: one node on loopback, no accounting database, no cgroups.
ClusterName=tilesweep
SlurmctldHost=localhost
SlurmctldParameters=enable_configless
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
# Keep finished jobs visible to squeue for an hour: the plugin's squeue status checks need it, and
# the test reads every job of a whole sweep back (at 5 minutes a slow sweep lost its first job).
MinJobAge=3600
# Refuse a job that can never fit at submission, instead of leaving it pending forever.
EnforcePartLimits=ALL
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$mem $gres State=UNKNOWN
PartitionName=$CPU_PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
	if [[ $GPU_PARTITION != "$CPU_PARTITION" ]]; then
		echo "PartitionName=$GPU_PARTITION Nodes=localhost MaxTime=INFINITE State=UP" >>"$CONF"
	fi
}

start_munge() {
	# The default socket: a configless slurmd authenticates before it has read any config.
	local run=/run/munge m=$DIR/munge
	munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return # one already answers
	mkdir -p "$run" "$m"
	chown munge:munge "$run" "$m"
	chmod 755 "$run"
	chmod 700 "$m"
	[[ -s $m/munge.key ]] || runuser -u munge -- mungekey --create --keyfile="$m/munge.key"
	runuser -u munge -- munged --key-file="$m/munge.key" --pid-file="$run/munged.pid" \
		--log-file="$m/munged.log" --seed-file="$m/munged.seed" ||
		die "munged did not start: $(tail -n 3 "$m/munged.log" 2>/dev/null)"
	cp "$run/munged.pid" "$DIR/munged.pid" # recorded as ours, so stop ends it
}

wait_idle() {
	local state=""
	for _ in $(seq 60); do
		state=$(SLURM_CONF=$CONF sinfo -h -N -n localhost -o %T 2>/dev/null | head -n 1 || true)
		[[ $state == idle ]] && return
		sleep 0.5
	done
	tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
	die "node localhost is '${state:-unknown}', not idle, after 30 s"
}

cmd_start() {
	[[ $(id -u) == 0 ]] || die "start needs root (slurmd runs jobs as their users)"
	for tool in munge munged mungekey slurmctld slurmd sbatch squeue sinfo; do
		command -v "$tool" >/dev/null || die "$tool not found: run '$0 install' first"
	done
	[[ -e /etc/slurm/slurm.conf ]] &&
		die "/etc/slurm/slurm.conf exists: this machine already belongs to a cluster; use that one"
	live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null &&
		die "a cluster already runs from $DIR: '$0 stop' first"
	rm -rf "$DIR/state" "$DIR/spool"
	mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
	write_conf
	start_munge
	SLURM_CONF=$CONF slurmctld -i || die "slurmctld did not start: $(tail -n 5 "$DIR/log/slurmctld.log")"
	env -u SLURM_CONF slurmd -N localhost --conf-server "localhost:$PORT" ||
		die "slurmd did not start: $(tail -n 5 "$DIR/log/slurmd.log")"
	wait_idle
	cat <<EOF
Local SLURM cluster up: node localhost, $CPUS CPUs, $NODE_GPUS fake GPUs, partitions $CPU_PARTITION and $GPU_PARTITION.
Run the sweep through it (no accounting database, hence squeue for status checks):
  export TILESWEEP_SLURM_NODE_GPUS=$NODE_GPUS TILESWEEP_SLURM_CPU_PARTITION=$CPU_PARTITION TILESWEEP_SLURM_GPU_PARTITION=$GPU_PARTITION
  snakemake --executor slurm --profile profiles/slurm --cores $CPUS --slurm-status-command squeue
Stop it with: $0 stop
EOF
}

stop_daemon() {
	local file=$1 name=$2 pid
	pid=$(live_pid "$file" "$name") || return 0
	kill "$pid"
	for _ in $(seq 100); do
		[[ -d /proc/$pid ]] || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

cmd_stop() {
	if live_pid "$DIR/slurmctld.pid" slurmctld >/dev/null; then
		export SLURM_CONF=$CONF
		scancel --quiet --user="$(id -un)" 2>/dev/null || true
		for _ in $(seq 100); do
			[[ -z $(squeue -h -t PD,R,CG -o %i 2>/dev/null) ]] && break
			sleep 0.1
		done
	fi
	stop_daemon "$DIR/slurmd.pid" slurmd
	stop_daemon "$DIR/slurmctld.pid" slurmctld
	stop_daemon "$DIR/munged.pid" munged
	rm -f "$DIR/munged.pid"
	# slurmd's link to its config cache, which clients on this machine would otherwise still find
	[[ $(readlink /run/slurm/conf 2>/dev/null) == "$DIR"/* ]] && rm -f /run/slurm/conf
	return 0
}

cmd_status() {
	SLURM_CONF=$CONF sinfo
	SLURM_CONF=$CONF squeue --states=all
}

case ${1:-} in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
	sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
