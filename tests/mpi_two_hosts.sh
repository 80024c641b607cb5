#!/usr/bin/env bash
# Two MPI ranks on two "hosts" of this machine: two Linux network namespaces,
# each with its own hostname, joined by a veth pair, so the collectives cross a
# network interface over TCP as they would between two machines.
#
#   host A: namespace rpA<pid>, hostname rp<pid>-a, veth rva<pid> 10.77.0.1/24
#   host B: namespace rpB<pid>, hostname rp<pid>-b, veth rvb<pid> 10.77.0.2/24
#
# mpirun runs on host A with a hostfile naming both addresses (one slot each)
# and, in place of ssh, a launch agent that enters host B's namespace (and a
# UTS namespace with B's hostname) to start OpenMPI's daemon there. TCP only,
# on the veth subnet only. Checks:
#  1. the two ranks ran in different network namespaces under different
#     hostnames, host B's started through the agent;
#  2. rank 0's checkpoint equals, byte for byte, that of 2 replica threads in
#     one process (both backends reduce in rank order);
#  3. more than parameters x 4 bytes x 2 x steps crossed the veth: every
#     step's gradients, once each way (the least any 2-rank all-reduce moves);
#  3b. a replica cut into 2 pipeline stages, one per host, trains what it trains on 2 threads;
#  4. a rank stopped on host B (SIGSTOP) makes rank 0 fail after the collective
#     timeout (RP_COMM_TIMEOUT=5) with an error naming rank and host, and the
#     job ends with an error instead of hanging.
# Then D4PG on 4 ranks, the learner on host A, 2 actors and the replay on host
# B: it makes its learner steps, the roles ran where placed, the sampled
# transitions crossed the veth, and an actor stopped on host B ends the job in
# bounded time, named by the replay (silent for longer than the timeout).
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN), iproute2, util-linux's unshare
# and OpenMPI. Without them, or with RP_TEST_NO_NETNS=1, it prints a line
# starting "SKIP:" and exits 0. Takes 40-70 s on 2 cores.
# Usage: mpi_two_hosts.sh path/to/replicator
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 path/to/replicator" >&2; exit 2; }
bin=$(realpath "$1")
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 0; }

data=/usr/share/datasets/fashion-mnist
[ -e "$data/train-images-idx3-ubyte.gz" ] \
    || skip "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)"
[ "${RP_TEST_NO_NETNS:-0}" = 1 ] && skip "RP_TEST_NO_NETNS=1: network namespaces not to be used"
command -v mpirun > /dev/null || skip "mpirun is not installed (OpenMPI)"
command -v ip > /dev/null || skip "no ip command (iproute2) to make network namespaces"
command -v unshare > /dev/null || skip "no unshare command (util-linux) to give each host its name"

nsa=rpA$$ nsb=rpB$$ vetha=rva$$ vethb=rvb$$ hosta=rp$$-a hostb=rp$$-b
addra=10.77.0.1 addrb=10.77.0.2 net=10.77.0.0/24
dir=$(mktemp -d)
cleanup() {
    local ns pid
    for ns in "$nsa" "$nsb"; do
        # Anything of this test still running in its namespaces (after a failure or timeout).
        for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -KILL "$pid" 2> /dev/null || true; done
        ip netns delete "$ns" 2> /dev/null || true # takes its end of the veth pair with it
    done
    ip link delete "$vetha" 2> /dev/null || true # if it never left this namespace
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$nsa" 2> "$dir/err" || skip "cannot create a network namespace (needs root): $(head -1 "$dir/err")"
ip netns add "$nsb" 2> "$dir/err" || skip "cannot create a network namespace: $(head -1 "$dir/err")"
{
    ip link add "$vetha" type veth peer name "$vethb" &&
        ip link set "$vetha" netns "$nsa" && ip link set "$vethb" netns "$nsb" &&
        ip -n "$nsa" addr add "$addra/24" dev "$vetha" && ip -n "$nsb" addr add "$addrb/24" dev "$vethb" &&
        ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
        ip -n "$nsa" link set "$vetha" up && ip -n "$nsb" link set "$vethb" up &&
        ip netns exec "$nsa" unshare --uts true
} 2> "$dir/err" || skip "cannot set up the veth pair and namespaces: $(head -1 "$dir/err")"

# host.sh NAME CMD...: runs CMD under hostname NAME (called inside a new UTS namespace).
cat > "$dir/host.sh" << 'EOF'
#!/bin/sh
hostname "$1" || exit 1
shift
exec "$@"
EOF
# The launch agent, called by mpirun as ssh would be: agent [ssh options] HOST COMMAND...
cat > "$dir/agent.sh" << EOF
#!/bin/sh
while [ \$# -gt 0 ]; do
    case "\$1" in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;; # ssh options that take a value
    -*) shift ;;
    *) break ;;
    esac
done
[ \$# -ge 2 ] || { echo "agent: usage: agent [options] HOST COMMAND..." >&2; exit 255; }
host=\$1
shift
case "\$host" in
$addra) ns=$nsa name=$hosta ;;
$addrb) ns=$nsb name=$hostb ;;
*) echo "agent: unknown host \$host" >&2; exit 255 ;;
esac
echo "\$host" >> "$dir/agent.log"
# As sshd does: the remote shell gets the words joined by spaces.
exec ip netns exec "\$ns" unshare --uts "$dir/host.sh" "\$name" sh -c "\$*"
EOF
# Each rank notes where it runs, then becomes replicator.
cat > "$dir/rank.sh" << EOF
#!/bin/sh
echo "rank \$OMPI_COMM_WORLD_RANK \$(hostname) \$(ip netns identify \$\$) \$\$" >> "$dir/ranks"
exec "\$@"
EOF
chmod +x "$dir/host.sh" "$dir/agent.sh" "$dir/rank.sh"
printf '%s slots=1\n%s slots=1\n' "$addra" "$addrb" > "$dir/hostfile"

# TCP only (ob1, not UCX), on the veth subnet only. --bind-to none: each "host" would bind its one
# rank to its core 0, the same core of this machine.
# shellcheck disable=SC2054 # "tcp,self" is one value
mpiflags=(--mca plm_rsh_agent "$dir/agent.sh"
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net"
    --bind-to none -x OMP_WAIT_POLICY -x ASAN_OPTIONS)
[ "$(id -u)" -eq 0 ] && mpiflags+=(--allow-run-as-root)
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# Under the sanitizer build: OpenMPI's own allocations at exit are not ours to report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"

# 1 kernel thread per replica on both sides: under mpirun a rank's kernel threads default to the
# host's cores / its ranks there, which differ between 2 hosts and 2 local threads, and a kernel's
# last bits depend on its thread count. --threads is the same too: the checkpoint records it.
train=(train resnet20 --data "$data" --limit 256 --batch 32 --threads 2 --threads-per-replica 1 --epochs 1)
steps=8 # 256 samples / batch 32, one epoch

bytes() { # RX + TX bytes of host A's end of the veth
    ip netns exec "$nsa" sh -c "echo \$((\$(cat /sys/class/net/$vetha/statistics/rx_bytes) + \$(cat /sys/class/net/$vetha/statistics/tx_bytes)))"
}
# launch_on HOSTFILE NP LOG ARGS...: mpirun of NP ranks on the hosts of HOSTFILE (filled in its
# order, by slot), started on host A, ARGS after its flags, output to LOG; returns mpirun's status.
launch_on() {
    local hostfile=$1 np=$2 log=$3
    shift 3
    timeout "${launch_limit:-300}" ip netns exec "$nsa" unshare --uts "$dir/host.sh" "$hosta" \
        mpirun -np "$np" --hostfile "$hostfile" "${mpiflags[@]}" "$@" > "$log" 2>&1
}
# launch LOG ARGS...: 2 ranks, one on each host.
launch() { launch_on "$dir/hostfile" 2 "$@"; }
before=$(bytes)
rc=0
launch "$dir/mpi.log" "$dir/rank.sh" "$bin" "${train[@]}" --quiet --out "$dir/mpi" || rc=$?
after=$(bytes)
[ $rc -eq 0 ] || { cat "$dir/mpi.log"; fail "mpirun on 2 namespaces exited with $rc"; }
cat "$dir/mpi.log"

# 1. Two hosts: different network namespaces and hostnames, host B started by the agent.
where=$(awk '{ print $1, $2, $3, $4 }' "$dir/ranks" | sort | paste -sd ';')
[ "$where" = "rank 0 $hosta $nsa;rank 1 $hostb $nsb" ] || fail "the ranks did not run one on each host: $where"
echo "ok: $where"
grep -qx "$addrb" "$dir/agent.log" || fail "host B was not started through the launch agent"

# 2. The same bytes as 2 replica threads in one process.
# Not --quiet: the header gives the parameter count.
out=$("$bin" "${train[@]}" --replicas 2 --out "$dir/threads" 2>&1) \
    || fail "2 replica threads: $out"
[ -f "$dir/mpi/checkpoint.safetensors" ] || fail "rank 0 wrote no checkpoint"
cmp "$dir/threads/checkpoint.safetensors" "$dir/mpi/checkpoint.safetensors" \
    || fail "2 ranks on 2 hosts and 2 threads wrote different checkpoints"

# 3. The gradients crossed the veth.
params=$(echo "$out" | sed -n 's/^ *\([0-9][0-9]*\) parameters;.*/\1/p')
[ -n "$params" ] || fail "no parameter count in: $out"
crossed=$((after - before)) need=$((params * 4 * 2 * steps))
echo "veth $vetha: $crossed bytes crossed (the gradients, once each way: $params parameters x 4 bytes x 2 x $steps steps = $need)"
[ "$crossed" -gt "$need" ] || fail "only $crossed bytes crossed the veth, expected more than $need"
echo "ok: 2 ranks on 2 network namespaces over TCP equal 2 threads, byte for byte"

# 3b. A replica cut into 2 stages, one per host (logical devices; 1F1B over 4 micro-batches): the
# activations and their gradients cross the veth, and the checkpoint's tensors are those of the
# same 2 stages on 2 threads (the configuration text differs only in the backend's count).
pipe=(--model-parallel 2 --pipeline 1f1b --micro-batches 4)
rc=0
launch "$dir/pipe.log" "$dir/rank.sh" "$bin" "${train[@]}" "${pipe[@]}" --out "$dir/mpipe" || rc=$?
[ $rc -eq 0 ] || { cat "$dir/pipe.log"; fail "2 stages on 2 hosts: mpirun exited with $rc"; }
grep -q "1 replica x 2 stages (1f1b over 4 micro-batches) = 2 workers in 2 ranks" "$dir/pipe.log" \
    || { cat "$dir/pipe.log"; fail "2 stages on 2 hosts: the header does not name the mesh"; }
"$bin" "${train[@]}" "${pipe[@]}" --replicas 1 --quiet --out "$dir/tpipe" > /dev/null 2>&1 \
    || fail "2 stages on 2 threads"
python3 - "$dir/tpipe/checkpoint.safetensors" "$dir/mpipe/checkpoint.safetensors" << 'PY' \
    || fail "2 stages on 2 hosts and on 2 threads trained different models"
import json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head, body = json.loads(raw[8:8 + n]), raw[8 + n:]
    return {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in head.items()
            if k != "__metadata__"}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
sys.exit(0 if a == b else "the tensors differ")
PY
{ grep -o "[0-9.]* img/s" "$dir/pipe.log" || true; } | tail -1 | sed "s/^/2 stages on 2 hosts: /"
echo "ok: a replica in 2 stages on 2 hosts trains what it trains on 2 threads"

# 4. A rank stopped on host B (SIGSTOP: alive but silent) makes rank 0 on host A fail once the
# collective timeout passes, with an error naming itself by rank and host (and rank 1 too when the
# stop caught it outside a collective: "rank 1 (HOST-B) did not arrive"; inside one, the data phase
# only knows that "a peer stopped"), and the whole job ends with an error instead of hanging.
: > "$dir/ranks"
RP_COMM_TIMEOUT=5 launch "$dir/stop.log" -x RP_COMM_TIMEOUT "$dir/rank.sh" "$bin" "${train[@]}" \
    --epochs 2 --out "$dir/stop" &
job=$!
for _ in $(seq 600); do grep -q "step 2/" "$dir/stop.log" && break; sleep 0.1; done
grep -q "step 2/" "$dir/stop.log" || { cat "$dir/stop.log"; fail "the run to stop made no progress"; }
pid=$(awk '$2 == 1 { print $5 }' "$dir/ranks")
[ -n "$pid" ] || fail "no pid for rank 1 in $(cat "$dir/ranks")"
kill -STOP "$pid"
start=$SECONDS
rc=0
wait $job || rc=$?
took=$((SECONDS - start))
[ $rc -ne 0 ] || { cat "$dir/stop.log"; fail "a stopped rank: the job exited 0"; }
[ $rc -ne 124 ] || { cat "$dir/stop.log"; fail "a stopped rank: the job hung until the test's timeout"; }
[ $took -lt 60 ] || { cat "$dir/stop.log"; fail "a stopped rank: the job took ${took}s to end, timeout 5s"; }
msg=$(grep -m1 "timed out after 5s.* on rank 0 ($hosta)" "$dir/stop.log") \
    || { cat "$dir/stop.log"; fail "no timeout error from rank 0 naming its host $hosta"; }
echo "ok: a stopped rank ends the job in ${took}s (timeout 5s), exit $rc: $msg"

# D4PG's roles across the two hosts: the learner (rank 0) on host A; the 2 actors (ranks 1-2) and
# the replay (rank 3) on host B (ranks go learners, actors, replay; the hostfile's slots place
# them), so every batch the learner samples crosses the veth, over the link communicator's
# point-to-point messages on TCP.
printf '%s slots=1\n%s slots=3\n' "$addra" "$addrb" > "$dir/hostfile.d4pg"
# shellcheck disable=SC2054 # "32,32" is one value
d4pg=(train d4pg --task cartpole-swingup --policy-layers 32,32 --critic-layers 32,32 --batch 32
    --min-replay 400 --eval-every 1000 --eval-episodes 2 --checkpoint-every 1000 --actors 2
    --threads 1)
d4pg_steps=1600 d4pg_batch=32 d4pg_row=$((2 * 5 + 1 + 2)) # (2000 - 400) x 32 / 32; cartpole: obs 5, act 1
: > "$dir/ranks"
before=$(bytes)
rc=0
launch_on "$dir/hostfile.d4pg" 4 "$dir/d4pg.log" "$dir/rank.sh" "$bin" "${d4pg[@]}" --env-steps 2000 \
    --quiet --out "$dir/d4pg" || rc=$?
after=$(bytes)
[ $rc -eq 0 ] || { cat "$dir/d4pg.log"; fail "D4PG on 2 namespaces: mpirun exited with $rc"; }
cat "$dir/d4pg.log"

# 1. The learner's steps, as on one host.
grep -q "d4pg on cartpole-swingup: $d4pg_steps learner steps" "$dir/d4pg.log" \
    || fail "D4PG on 2 hosts did not make $d4pg_steps learner steps"

# 2. Each role on its host: the learner in host A's namespace, the actors and the replay in B's.
where=$(awk '{ print $1, $2, $3, $4 }' "$dir/ranks" | sort | paste -sd ';')
[ "$where" = "rank 0 $hosta $nsa;rank 1 $hostb $nsb;rank 2 $hostb $nsb;rank 3 $hostb $nsb" ] \
    || fail "D4PG's roles did not run learner on A, actors and replay on B: $where"
echo "ok: $where"

# 3. The experience crossed the veth: at least the transitions of every sampled batch, replay (B)
# to learner (A), each a row of obs, action, reward, discount and next obs in f32. (More than the
# env steps' transitions too, 2000 x $d4pg_row x 4 bytes: each is sampled about 32 times.)
crossed=$((after - before)) need=$((d4pg_steps * d4pg_batch * d4pg_row * 4))
echo "veth $vetha: $crossed bytes crossed (the sampled transitions: $d4pg_steps steps x batch $d4pg_batch x $d4pg_row floats x 4 bytes = $need)"
[ "$crossed" -gt "$need" ] || fail "D4PG: only $crossed bytes crossed the veth, expected more than $need"
echo "ok: D4PG, learner on host A, actors and replay on host B, over TCP"

# 4. An actor stopped on host B (SIGSTOP: alive but silent) ends the job in bounded time instead of
# hanging or going on without it: the replay, hearing nothing from it for longer than the timeout
# (--timeout 5) while nothing holds it, fails naming the actor, and the job ends with an error long
# before its budget (10^6 env steps) would.
: > "$dir/ranks"
launch_limit=90 launch_on "$dir/hostfile.d4pg" 4 "$dir/d4pg-stop.log" "$dir/rank.sh" "$bin" "${d4pg[@]}" \
    --env-steps 1000000 --timeout 5 --out "$dir/d4pg-stop" &
job=$!
# Stopped at the first evaluation (learner step 1000), while both actors feed the replay.
for _ in $(seq 600); do grep -q "eval return" "$dir/d4pg-stop.log" && break; sleep 0.1; done
grep -q "eval return" "$dir/d4pg-stop.log" || { cat "$dir/d4pg-stop.log"; fail "the D4PG run to stop made no progress"; }
pid=$(awk '$2 == 1 { print $5 }' "$dir/ranks")
[ -n "$pid" ] || fail "no pid for D4PG's actor rank 1 in $(cat "$dir/ranks")"
[ "$(readlink "/proc/$pid/exe")" = "$bin" ] || fail "D4PG's actor rank 1 (pid $pid) is not $bin"
kill -STOP "$pid"
start=$SECONDS
rc=0
wait $job || rc=$?
took=$((SECONDS - start))
[ $rc -ne 0 ] || { cat "$dir/d4pg-stop.log"; fail "a stopped D4PG actor: the job exited 0"; }
[ $rc -ne 124 ] || { cat "$dir/d4pg-stop.log"; fail "a stopped D4PG actor: the job hung until the test's limit (90 s)"; }
[ $took -lt 60 ] || { cat "$dir/d4pg-stop.log"; fail "a stopped D4PG actor: the job took ${took}s to end, timeout 5s"; }
msg=$(grep -m1 "heard nothing from actor 0 (worker 1)" "$dir/d4pg-stop.log") \
    || { cat "$dir/d4pg-stop.log"; fail "a stopped D4PG actor: no error naming actor 0 (worker 1)"; }
echo "ok: a stopped D4PG actor on host B ended the job ${took}s after the stop, exit $rc: $msg"
echo "all two-host checks passed"
