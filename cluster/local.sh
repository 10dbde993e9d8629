#!/usr/bin/env bash
# A Ray cluster on this machine, bound to loopback, for `ray job submit` and fault tests.
#
#   cluster/local.sh start           start a head node (127.0.0.1 only)
#   cluster/local.sh join            add a second worker node on loopback to that head
#   cluster/local.sh submit CONFIG   ray job submit ... -- python -m jobs.align CONFIG
#   cluster/local.sh status          ray status of this cluster
#   cluster/local.sh lose            kill the newest joined node at once (fault tests)
#   cluster/local.sh stop            stop this cluster's processes (head and joined nodes)
#   cluster/local.sh stop --all      `ray stop`: every Ray process on the machine
#
# It runs the `ray` found on PATH: activate the project's venv first
# (`. .venv/bin/activate`), so that the head, its workers and the job use the same Ray,
# torch and tfgm_dist.
#
# Environment (defaults in brackets):
#   RAY_PORT            GCS port of the head                         [6379]
#   RAY_DASHBOARD_PORT  dashboard / job API port                     [8265]
#   RAY_NUM_CPUS        CPUs each node offers                        [all]
#   RAY_NUM_GPUS        GPUs each node offers                        [auto-detected]
#   RAY_TEMP_DIR        Ray's temp/session dir for this cluster      [/tmp/ray-tfgm-$RAY_PORT]
#   RAY_AUTH_MODE       token | disabled                             [token]
#
# Security: every listening socket of every node is bound to 127.0.0.1, so nothing is
# reachable from another machine. `--node-ip-address=127.0.0.1` alone does not do that on
# Linux: Ray replaces a loopback node ip with the machine's routable address and its GCS and
# raylets then listen on all interfaces. In Ray's single-machine mode
# (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, the default on macOS and Windows) the node ip stays
# 127.0.0.1 and the GCS, raylet, agents, client server and dashboard all bind to it (checked
# with `ss -ltn` on Ray 2.60). This script exports that mode to every ray command it runs.
# Other users of this machine are kept out by Ray's token authentication, which this script
# turns on (RAY_AUTH_MODE=token; `start` creates ~/.ray/auth_token if no token exists, as
# `ray get-auth-token --generate` does). Every ray command it runs then sends the token, and the
# job's driver and workers inherit it. RAY_AUTH_MODE=disabled opts out.
set -euo pipefail

export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-token}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RAY_PORT=${RAY_PORT:-6379}
RAY_DASHBOARD_PORT=${RAY_DASHBOARD_PORT:-8265}
RAY_NUM_CPUS=${RAY_NUM_CPUS:-}
RAY_NUM_GPUS=${RAY_NUM_GPUS:-}
# One temp dir per cluster (per port) so that `stop` can find exactly this cluster's
# processes and leave any other Ray on the machine alone.
RAY_TEMP_DIR=${RAY_TEMP_DIR:-/tmp/ray-tfgm-$RAY_PORT}
LOOPBACK=127.0.0.1
JOB_ADDRESS="http://$LOOPBACK:$RAY_DASHBOARD_PORT"
GCS_ADDRESS="$LOOPBACK:$RAY_PORT"

usage() {
  cat >&2 <<EOF
usage: cluster/local.sh start | join | submit CONFIG | status | lose | stop [--all]

  start          start a local Ray head bound to $LOOPBACK (GCS port \$RAY_PORT=$RAY_PORT,
                 dashboard/job API port \$RAY_DASHBOARD_PORT=$RAY_DASHBOARD_PORT,
                 CPUs \$RAY_NUM_CPUS=${RAY_NUM_CPUS:-all}, temp dir \$RAY_TEMP_DIR=$RAY_TEMP_DIR)
  join           add a worker node on $LOOPBACK joined to that head (fault tests)
  submit CONFIG  ray job submit --address $JOB_ADDRESS (PYTHONPATH=$ROOT)
                   -- python -m jobs.align CONFIG
  status         ray status --address $GCS_ADDRESS
  lose           kill the newest joined node at once (fault tests: a lost machine)
  stop           stop the processes of this cluster (those under \$RAY_TEMP_DIR)
  stop --all     ray stop: stop every Ray process on this machine

Uses the \`ray\` on PATH: activate the project's venv first.
EOF
}

need_ray() {
  if ! command -v ray >/dev/null 2>&1; then
    echo "error: no \`ray\` on PATH; activate the project's venv first (. .venv/bin/activate)" >&2
    exit 2
  fi
}

# The Python interpreter of the `ray` on PATH (the one its launcher script names).
ray_python() {
  local ray_bin first
  ray_bin=$(command -v ray)
  first=$(head -n 1 "$ray_bin")
  if [[ "$first" == '#!'* && -x "${first#\#!}" ]]; then
    echo "${first#\#!}"
  else
    command -v python3 || command -v python
  fi
}

# N TCP ports free on loopback now, distinct from each other and from $RAY_PORT and
# $RAY_DASHBOARD_PORT. Each node's dashboard agent and the head's Ray client server get one:
# their fixed defaults (52365, 10001) collide with any other Ray on the machine, and an agent
# without its HTTP port cannot run jobs. The sockets stay bound until all are picked, and the
# head's own ports are skipped: a port just released is handed out again (a caller that
# chose RAY_PORT the same way got it back as the client server's, and `ray start` refused).
free_ports() {
  "$(ray_python)" - "$1" "$RAY_PORT" "$RAY_DASHBOARD_PORT" <<'PY'
import socket
import sys

wanted, taken = int(sys.argv[1]), {int(p) for p in sys.argv[2:]}
held, ports = [], []
while len(ports) < wanted:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
    if s.getsockname()[1] not in taken:
        ports.append(s.getsockname()[1])
print(*ports)
PY
}

resource_args() {
  local -n out=$1
  if [[ -n "$RAY_NUM_CPUS" ]]; then out+=("--num-cpus=$RAY_NUM_CPUS"); fi
  if [[ -n "$RAY_NUM_GPUS" ]]; then out+=("--num-gpus=$RAY_NUM_GPUS"); fi
}

cmd_start() {
  need_ray
  mkdir -p "$RAY_TEMP_DIR"
  if [[ "$RAY_AUTH_MODE" == token && -z "${RAY_AUTH_TOKEN:-}" && -z "${RAY_AUTH_TOKEN_PATH:-}" ]]; then
    ray get-auth-token --generate >/dev/null  # no-op when ~/.ray/auth_token exists
  fi
  local agent_port client_port
  read -r agent_port client_port < <(free_ports 2)
  local args=(start --head
    --node-ip-address=127.0.0.1
    --port="$RAY_PORT"
    --dashboard-host=127.0.0.1
    --dashboard-port="$RAY_DASHBOARD_PORT"
    --dashboard-agent-listen-port="$agent_port"
    --ray-client-server-port="$client_port"
    --temp-dir="$RAY_TEMP_DIR"
    --disable-usage-stats)
  resource_args args
  ray "${args[@]}"
  cat <<EOF

Ray head running on loopback only.
  dashboard / job API  $JOB_ADDRESS
  GCS address          $GCS_ADDRESS
Submit the alignment job:
  cluster/local.sh submit jobs/configs/yeast-job.toml
  # which runs:
  ray job submit --address $JOB_ADDRESS --runtime-env-json '{"env_vars": {"PYTHONPATH": "$ROOT"}}' -- python -m jobs.align $ROOT/jobs/configs/yeast-job.toml
Stop it with: cluster/local.sh stop
EOF
}

# `ray start --address` refuses to add a node in single-machine mode, and outside it turns
# 127.0.0.1 (in --address and --node-ip-address) into the routable address, where this
# loopback-only head does not listen. So the worker node is started through Ray's own CLI with
# those two behaviours switched off in-process (private Ray names, checked on Ray 2.60): it
# joins 127.0.0.1:$RAY_PORT as a second node with node ip 127.0.0.1, and its processes inherit
# the single-machine mode, so they bind to loopback too. Equivalent to
#   ray start --address 127.0.0.1:$RAY_PORT --node-ip-address=127.0.0.1
cmd_join() {
  need_ray
  local py
  py=$(ray_python)
  local args=(start
    --address="$GCS_ADDRESS"
    --node-ip-address=127.0.0.1
    --dashboard-agent-listen-port="$(free_ports 1)"
    --temp-dir="$RAY_TEMP_DIR"
    --disable-usage-stats)
  resource_args args
  "$py" - "${args[@]}" <<'PY'
import sys

from ray._private import ray_constants, services

ray_constants.ENABLE_RAY_CLUSTER = True  # allow a second node on this machine
services.resolve_ip_for_localhost = lambda host: host  # keep 127.0.0.1 as given

from ray.scripts.scripts import main  # noqa: E402

sys.argv[0] = "ray"
sys.exit(main())
PY
  echo "worker node joined $GCS_ADDRESS on 127.0.0.1 (stop both with: cluster/local.sh stop)"
}

cmd_submit() {
  if [[ $# -ne 1 ]]; then
    usage
    exit 2
  fi
  need_ray
  # A local cluster shares this filesystem: the job runs the repo in place (PYTHONPATH) with
  # the config's absolute path, so the config's relative paths (resolved against the
  # config's folder) work. Remote clusters upload the repo with --working-dir instead.
  local config
  config=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  exec ray job submit --address "$JOB_ADDRESS" \
    --runtime-env-json "{\"env_vars\": {\"PYTHONPATH\": \"$ROOT\"}}" \
    -- python -m jobs.align "$config"
}

cmd_status() {
  need_ray
  exec ray status --address "$GCS_ADDRESS"
}

# This cluster's processes, one "PID KIND" line each (KIND: raylet, gcs or other): every
# process whose command line names its session directory ($RAY_TEMP_DIR/session_<date>_<pid>,
# shared by the head and joined nodes), its Ray client server, and all their descendants
# (Ray workers rename themselves `ray::...` and lose that path).
cluster_procs() {
  local session
  session=$(readlink -f "${RAY_TEMP_DIR%/}/session_latest" 2>/dev/null) || return 0
  [[ "$session" == */session_2* ]] || return 0
  local marker="$session/" pid ppid args line
  local -A mine=() kind=()
  local -a table=()
  mapfile -t table < <(ps -eo pid=,ppid=,args=)
  for line in "${table[@]}"; do
    read -r pid ppid args <<<"$line"
    [[ "$pid" == "$$" ]] && continue
    if [[ "$args" == *"$marker"* ||
          ( "$args" == *ray.util.client.server* && "$args" == *"--address="*":$RAY_PORT "* ) ]]; then
      mine[$pid]=1
      case "$args" in
        */raylet/raylet\ *) kind[$pid]=raylet ;;
        */gcs/gcs_server\ *) kind[$pid]=gcs ;;
      esac
    fi
  done
  local grew=1
  while [[ $grew -eq 1 ]]; do
    grew=0
    for line in "${table[@]}"; do
      read -r pid ppid args <<<"$line"
      if [[ -n "${mine[$ppid]:-}" && -z "${mine[$pid]:-}" ]]; then
        mine[$pid]=1
        grew=1
      fi
    done
  done
  for pid in "${!mine[@]}"; do echo "$pid ${kind[$pid]:-other}"; done
}

# A pid that still runs (a zombie waiting for its parent to reap it does not).
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z* ]]
}

# SIGTERM the given pids, wait up to $1 seconds, then SIGKILL what is left.
terminate() {
  local wait_s=$1 p i left
  shift
  [[ $# -eq 0 ]] && return 0
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < wait_s * 5; i++)); do
    left=()
    for p in "$@"; do
      if alive "$p"; then left+=("$p"); fi
    done
    [[ ${#left[@]} -eq 0 ]] && return 0
    sleep 0.2
  done
  kill -KILL "${left[@]}" 2>/dev/null || true
}

cmd_stop() {
  if [[ "${1:-}" == "--all" ]]; then
    need_ray
    exec ray stop
  fi
  if [[ $# -ne 0 ]]; then
    usage
    exit 2
  fi
  local procs pid k
  local -a raylets=() gcs=() others=()
  procs=$(cluster_procs)
  if [[ -z "$procs" ]]; then
    echo "no Ray processes under $RAY_TEMP_DIR"
    return 0
  fi
  while read -r pid k; do
    case "$k" in
      raylet) raylets+=("$pid") ;;
      gcs) gcs+=("$pid") ;;
      *) others+=("$pid") ;;
    esac
  done <<<"$procs"
  # Ray's own order (as `ray stop`): raylets, then the rest, the GCS last.
  terminate 10 "${raylets[@]}"
  terminate 10 "${others[@]}"
  terminate 10 "${gcs[@]}"
  echo "stopped the Ray cluster under $RAY_TEMP_DIR ($(wc -l <<<"$procs") processes)"
}

# Fault tests: the newest joined node dies at once (SIGKILL to its raylet and every process
# under it), as when a machine is lost; the head and the job's driver live on.
cmd_lose() {
  local procs pid k newest="" age best=""
  procs=$(cluster_procs)
  while read -r pid k; do
    [[ "$k" == raylet ]] || continue
    age=$(ps -o etimes= -p "$pid" | tr -d ' ')
    if [[ -z "$best" || "$age" -lt "$best" ]]; then best=$age; newest=$pid; fi
  done <<<"$procs"
  if [[ -z "$newest" || $(grep -c ' raylet$' <<<"$procs") -lt 2 ]]; then
    echo "error: no joined node to lose under $RAY_TEMP_DIR" >&2
    exit 2
  fi
  local -a doomed=("$newest") table=()
  mapfile -t table < <(ps -eo pid=,ppid=)
  local grew=1 line ppid d
  while [[ $grew -eq 1 ]]; do
    grew=0
    for line in "${table[@]}"; do
      read -r pid ppid <<<"$line"
      for d in "${doomed[@]}"; do
        if [[ "$ppid" == "$d" && " ${doomed[*]} " != *" $pid "* ]]; then
          doomed+=("$pid"); grew=1
        fi
      done
    done
  done
  kill -KILL "${doomed[@]}" 2>/dev/null || true
  echo "lost the node of raylet $newest (${#doomed[@]} processes killed)"
}

main() {
  local sub=${1:-}
  if [[ $# -gt 0 ]]; then shift; fi
  case "$sub" in
    start) [[ $# -eq 0 ]] || { usage; exit 2; }; cmd_start ;;
    join) [[ $# -eq 0 ]] || { usage; exit 2; }; cmd_join ;;
    submit) cmd_submit "$@" ;;
    status) cmd_status ;;
    lose) [[ $# -eq 0 ]] || { usage; exit 2; }; cmd_lose ;;
    stop) cmd_stop "$@" ;;
    -h | --help | help) usage ;;
    *)
      if [[ -n "$sub" ]]; then echo "error: unknown subcommand '$sub'" >&2; fi
      usage
      exit 2
      ;;
  esac
}

main "$@"
