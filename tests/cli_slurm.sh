#!/usr/bin/env bash
# replicator under a real Slurm: a one-node cluster of Debian's slurmctld, slurmd and munged,
# configured in a temporary directory (its own munge key and socket, state, spool, logs and
# ports; proctrack/linuxproc and task/none, since a container has no cgroup hierarchy of its own
# for slurmd), then:
#  1. sbatch scripts/slurm/train.sbatch (mpirun inside the allocation, 2 tasks): the job
#     completes and its checkpoint holds step 4;
#  2. srun -n2 --mpi=pmix (Slurm's PMIx plugin starts the 2 ranks) resumes it to step 8;
#  3. a third job resumes it for many steps and is cancelled with scancel once it has written a
#     checkpoint: the job ends CANCELLED, the checkpoint it leaves loads (replicator eval checks
#     its CRC) at a step past 8, and a fourth job (srun) resumes from it, two steps further.
# Skips, naming what is missing, when not root (slurmd and munged need it), without the
# packages (slurmctld slurmd slurm-client munge; scripts/setup.sh installs them) or mpirun, or
# when a daemon cannot start here: then the daemon's own last log lines are the reason.
# Usage: cli_slurm.sh path/to/replicator
set -euo pipefail
bin=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
sbatch_script="$here/../scripts/slurm/train.sbatch"
# shellcheck source=tests/lib.sh
. "$here/lib.sh"
need_fashion_mnist
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

[ "$(id -u)" -eq 0 ] || skip "a one-node Slurm needs root (slurmd runs jobs as their users;" \
    "munged runs as the munge user)"
for tool in munged mungekey munge slurmctld slurmd sbatch srun scancel scontrol sinfo mpirun; do
    command -v "$tool" > /dev/null || [ -x "/usr/sbin/$tool" ] \
        || skip "$tool is not installed (apt-get install slurmctld slurmd slurm-client munge" \
            "openmpi-bin; scripts/setup.sh does)"
done
id munge > /dev/null 2>&1 || skip "no munge user (the munge package creates it)"
export PATH="$PATH:/usr/sbin"

dir=$(mktemp -d /tmp/rp-slurm.XXXXXX)
chmod 755 "$dir" # munged's socket must be reachable by every user
pids=()
cleanup() {
    # Jobs first (scancel, then our own timeouts), then the daemons, each by its pid.
    if [ -n "${SLURM_CONF:-}" ] && [ -e "$dir/slurmctld.pid" ]; then
        scancel --quiet --user=root > /dev/null 2>&1 || true
        sleep 1
    fi
    local p
    for f in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -s "$f" ] && kill "$(cat "$f")" 2> /dev/null || true
    done
    for p in "${pids[@]}"; do
        kill "$p" 2> /dev/null || true
        wait "$p" 2> /dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT

# munged: its own key, socket, pid, log and seed, run as the munge user in the foreground.
install -d -o munge -g munge -m 0755 "$dir/munge"
runuser -u munge -- mungekey -c -k "$dir/munge/munge.key" > /dev/null 2>&1 \
    || skip "mungekey cannot create a key: $(runuser -u munge -- mungekey -c -k "$dir/munge/k2" 2>&1 | tail -1)"
sock="$dir/munge/munge.socket.2"
runuser -u munge -- munged -F -S "$sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed" > "$dir/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
    munge -n -S "$sock" 2> /dev/null | unmunge -S "$sock" > /dev/null 2>&1 && break
    kill -0 "${pids[0]}" 2> /dev/null || skip "munged cannot run here: $(tail -1 "$dir/munged.out")"
    sleep 0.1
done
munge -n -S "$sock" | unmunge -S "$sock" > /dev/null 2>&1 \
    || skip "munged does not answer on $sock: $(tail -1 "$dir/munged.out")"

# slurm.conf: one node on loopback, this host's short name (slurmd checks it), ports of our own.
host=$(hostname -s)
port=$((20000 + ($$ % 10000) * 2))
mkdir -p "$dir/state" "$dir/spool" "$dir/log"
cat > "$dir/slurm.conf" << CONF
ClusterName=rptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
KillWait=10
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" > "$dir/slurmd.out" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 60); do
    state=$(sinfo -h -o %T 2> /dev/null || true)
    [ "$state" = idle ] && break
    kill -0 "${pids[1]}" 2> /dev/null \
        || skip "slurmctld cannot run here: $(tail -2 "$dir/slurmctld.out" | tr '\n' ' ')"
    kill -0 "${pids[2]}" 2> /dev/null \
        || skip "slurmd cannot run here: $(tail -2 "$dir/slurmd.out" | tr '\n' ' ')"
    sleep 0.5
done
[ "$state" = idle ] || skip "the node did not come up (sinfo: ${state:-nothing}): " \
    "$(tail -2 "$dir/log/slurmd.log" | tr '\n' ' ')"
echo "ok: a one-node Slurm ($(sinfo -V)) is up on $host"

export REPLICATOR="$bin" OMP_WAIT_POLICY=passive
run="$dir/run"
# The MLP: the scheduler is under test, not the model (8 steps an epoch; cheap under ASan too).
args=(--threads 1 --data "$data" --limit 512 --batch 64)
# step FILE: the global step a checkpoint holds (train/position[2]), read from the safetensors
# header and buffer.
step() {
    python3 - "$1" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
t = json.loads(raw[8:8 + n])["train/position"]
b, e = t["data_offsets"]
print(struct.unpack("<3q", raw[8 + n + b:8 + n + e])[2])
PY
}
# wait_job ID: until job ID has left the running states (60 s at most); prints its state.
wait_job() {
    local s=""
    for _ in $(seq 120); do
        s=$(scontrol show job "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        case "$s" in PENDING | CONFIGURING | RUNNING | COMPLETING | SUSPENDED) sleep 0.5 ;; *) break ;; esac
    done
    echo "$s"
}

# 1. sbatch, mpirun inside the allocation.
id=$(sbatch --parsable -o "$dir/job-%j.out" "$sbatch_script" mlp "${args[@]}" \
    --max-steps 4 --out "$run")
s=$(wait_job "$id")
[ "$s" = COMPLETED ] || { tail -5 "$dir/job-$id.out"; fail "sbatch job $id ended $s"; }
grep -q "2 replicas (2 ranks x 1)" "$dir/job-$id.out" || fail "job $id did not run 2 ranks"
[ "$(step "$run/checkpoint.safetensors")" = 4 ] || fail "job $id's checkpoint is not at step 4"
echo "ok: sbatch job $id (mpirun, 2 ranks) completed; its checkpoint holds step 4"

# 2. srun with Slurm's PMIx plugin resumes it.
srun -n2 --mpi=pmix "$bin" train --resume "$run" --backend mpi --threads 1 --max-steps 8 \
    > "$dir/srun.out" 2>&1 || { tail -5 "$dir/srun.out"; fail "srun --mpi=pmix"; }
grep -q "2 replicas (2 ranks x 1)" "$dir/srun.out" || fail "srun did not run 2 ranks"
[ "$(step "$run/checkpoint.safetensors")" = 8 ] || fail "the srun job did not resume to step 8"
echo "ok: srun -n2 --mpi=pmix resumed it to step 8"

# 3. scancel mid-run, then resume.
id=$(sbatch --parsable -o "$dir/job-%j.out" "$sbatch_script" --resume "$run" --epochs 1000 \
    --max-steps 100000)
for _ in $(seq 240); do
    [ "$(step "$run/checkpoint.safetensors")" -gt 8 ] && break
    sleep 0.5
done
at=$(step "$run/checkpoint.safetensors")
[ "$at" -gt 8 ] || fail "job $id wrote no checkpoint past step 8 in 2 minutes"
scancel "$id"
s=$(wait_job "$id")
[ "$s" = CANCELLED ] || fail "scancel $id left it $s"
at=$(step "$run/checkpoint.safetensors")
[ "$at" -gt 8 ] || fail "the cancelled job's checkpoint is at step $at"
out=$("$bin" eval "$run" --threads 1 2>&1) || fail "the cancelled job's checkpoint does not load: $out"
grep -q "checkpoint after $at steps" <<< "$out" || fail "eval: $out"
srun -n2 --mpi=pmix "$bin" train --resume "$run" --backend mpi --threads 1 \
    --max-steps $((at + 2)) > "$dir/srun2.out" 2>&1 || { tail -5 "$dir/srun2.out"; fail "resume"; }
[ "$(step "$run/checkpoint.safetensors")" = $((at + 2)) ] || fail "no resume after scancel"
echo "ok: scancel left job $id $s with an intact checkpoint at step $at; srun resumed it to" \
    "step $((at + 2))"
