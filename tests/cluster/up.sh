#!/usr/bin/env bash
# Starts a local Kubernetes control plane on loopback, as plain processes:
#   etcd, kube-apiserver (own PKI, RBAC on, OwnerReferencesPermissionEnforcement on as in
#   hardened clusters), kube-controller-manager, kube-scheduler,
#   and kwok managing one fake node, so that pods become Running/Ready.
# Every port is picked free at start, so two clones can each run their own cluster.
# State, logs, pids and the kubeconfig live in $RULEOP_CLUSTER_DIR (default
# <repo>/target/cluster); the kubeconfig is $RULEOP_CLUSTER_DIR/kubeconfig.
# Idempotent: if this cluster is already up, says so and exits 0.
# RULEOP_MINIMAL=1 starts only etcd and the API server (for benchmarks: every write then
# comes from the system under test or the benchmark client).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=versions.sh
source "$here/versions.sh"
dir="${RULEOP_CLUSTER_DIR:-$repo/target/cluster}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
pki="$dir/pki" logs="$dir/logs" pids="$dir/pids"
kubeconfig="$dir/kubeconfig"
node_name="${RULEOP_NODE_NAME:-kwok-node-0}"

log() { printf '[up] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

alive() { [ -f "$pids/$1.pid" ] && kill -0 "$(cat "$pids/$1.pid")" 2>/dev/null; }
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
[ "${RULEOP_MINIMAL:-0}" = 1 ] && components=(etcd kube-apiserver)

all_alive=1
any_alive=0
for c in "${components[@]}"; do
  if alive "$c"; then any_alive=1; else all_alive=0; fi
done
if [ "$all_alive" = 1 ] && kubectl --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
  log "cluster already up in $dir (kubeconfig: $kubeconfig)"
  exit 0
fi
if [ "$any_alive" = 1 ]; then
  log "cluster in $dir is partly up; stopping it first"
  "$here/down.sh"
  mkdir -p "$dir"
fi

"$here/build.sh"
for b in "$ETCD_BIN/etcd" "$K8S_BIN/kube-apiserver" "$K8S_BIN/kube-controller-manager" \
         "$K8S_BIN/kube-scheduler" "$KWOK_BIN/kwok"; do
  [ -x "$b" ] || die "missing binary $b (tests/cluster/build.sh failed?)"
done
command -v kubectl >/dev/null || die "kubectl is required"
command -v openssl >/dev/null || die "openssl is required"

started=$(date +%s%3N)
rm -rf "$dir/etcd" "$pki" "$logs" "$pids"
mkdir -p "$pki" "$logs" "$pids"

# --- free ports -------------------------------------------------------------
# Below the kernel's ephemeral range: a port picked there can be taken by any outgoing
# connection (the tests make thousands) before the component that is to listen on it
# starts; here only another listener can take it.
free_port() {
  python3 - <<'PY'
import random, socket
lo = 32768
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except Exception:
    pass
for _ in range(200):
    port = random.randrange(10000, max(10001, lo))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
PY
}
etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port)
kcm_port=$(free_port); sched_port=$(free_port); kwok_port=$(free_port)
cat >"$dir/ports.env" <<PORTS
ETCD_PORT=$etcd_port
ETCD_PEER_PORT=$etcd_peer
APISERVER_PORT=$api_port
KCM_PORT=$kcm_port
SCHEDULER_PORT=$sched_port
KWOK_PORT=$kwok_port
PORTS

# --- PKI --------------------------------------------------------------------
(
  cd "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -keyout ca.key -out ca.crt -subj "/CN=ruleop-local-ca" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n' >apiserver.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile apiserver.ext -out apiserver.crt 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=ruleop-admin" 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n' >client.ext
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile client.ext -out admin.crt 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  chmod 600 ./*.key
)

b64() { base64 -w0 <"$1"; }
cat >"$kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: ruleop-local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: ruleop-admin
  user:
    client-certificate-data: $(b64 "$pki/admin.crt")
    client-key-data: $(b64 "$pki/admin.key")
contexts:
- name: ruleop-local
  context:
    cluster: ruleop-local
    user: ruleop-admin
current-context: ruleop-local
KCFG
chmod 600 "$kubeconfig"

# --- processes --------------------------------------------------------------
start() {
  local name="$1"; shift
  # The command is kept so that ctl.sh can restart this component alone.
  mkdir -p "$dir/cmd" && printf '%q ' "$@" >"$dir/cmd/$name"
  setsid "$@" >"$logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pids/$name.pid"
}
wait_for() { # name, seconds, command...
  local name="$1" secs="$2"; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    alive "$name" || { tail -n 30 "$logs/$name.log" >&2; die "$name exited; log: $logs/$name.log"; }
    [ "$(date +%s)" -lt "$deadline" ] || { tail -n 30 "$logs/$name.log" >&2; die "$name not ready after ${secs}s; log: $logs/$name.log"; }
    sleep 0.2
  done
}
https_ok() { curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$1"; }
# The controller-manager and scheduler serve their own self-signed certs on loopback.
health_ok() { curl -sfk "$1"; }

start etcd "$ETCD_BIN/etcd" \
  --name default --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "default=http://127.0.0.1:$etcd_peer" \
  --listen-metrics-urls "" --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn
wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

# The API server's storage version migrator (StorageVersionMigration: beta, off by default
# in Kubernetes 1.36), so that ruleop's use of it is tested; RULEOP_STORAGE_MIGRATOR=0
# leaves it off, as most clusters have it (ruleop then migrates by itself).
svm_apiserver="" svm_kcm=""
case "$K8S_VERSION" in v1.[0-9].*|v1.[12][0-9].*|v1.3[0-4].*) RULEOP_STORAGE_MIGRATOR=0 ;; esac # (beta from 1.35)
if [ "${RULEOP_STORAGE_MIGRATOR:-1}" = 1 ]; then
  svm_apiserver="--feature-gates StorageVersionMigrator=true --runtime-config storagemigration.k8s.io/v1beta1=true"
  svm_kcm="--feature-gates StorageVersionMigrator=true"
fi

start kube-apiserver "$K8S_BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --authorization-mode RBAC --anonymous-auth=false \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
  --allow-privileged=true --disable-admission-plugins ServiceAccount \
  --enable-admission-plugins OwnerReferencesPermissionEnforcement \
  --cert-dir "$pki" $svm_apiserver ${RULEOP_APISERVER_EXTRA_ARGS:-}
wait_for kube-apiserver 90 https_ok "https://127.0.0.1:$api_port/readyz"
ready_at=$(date +%s%3N)

if [ "${RULEOP_MINIMAL:-0}" = 1 ]; then
  secs() { printf '%d.%01d' $(( $1 / 1000 )) $(( ($1 % 1000) / 100 )); }
  log "minimal control plane (etcd + kube-apiserver): /readyz after $(secs $((ready_at - started)))s"
  log "kubeconfig: $kubeconfig"
  exit 0
fi

start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$dir/kcm-certs" \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --use-service-account-credentials=false --leader-elect=false --controllers '*' $svm_kcm ${RULEOP_KCM_EXTRA_ARGS:-}
start kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$sched_port" --cert-dir "$dir/scheduler-certs" --leader-elect=false ${RULEOP_SCHEDULER_EXTRA_ARGS:-}

# One fake node, managed by kwok (selected by annotation), with room for many pods.
kubectl --kubeconfig "$kubeconfig" apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: $node_name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $node_name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: "1000", memory: 4Ti, pods: "10000"}
  capacity: {cpu: "1000", memory: 4Ti, pods: "10000"}
NODE

{
  cat <<CFG
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageAllNodes: false
  manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake
  cidr: 10.244.0.1/16
  nodeIP: 10.244.255.1
  serverAddress: 127.0.0.1:$kwok_port
  # A configuration file gets none of kwok's flag defaults: set them here.
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  nodeLeaseDurationSeconds: 40
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: false
  enableProfilingHandler: false
  enableContentionProfiling: false
CFG
  for s in "$KWOK_STAGES"/*.yaml; do echo "---"; cat "$s"; done
} >"$dir/kwok.yaml"
start kwok "$KWOK_BIN/kwok" --kubeconfig "$kubeconfig" --config "$dir/kwok.yaml"

kc() { kubectl --kubeconfig "$kubeconfig" "$@"; }
wait_for kube-controller-manager 60 health_ok "https://127.0.0.1:$kcm_port/healthz"
wait_for kube-scheduler 60 health_ok "https://127.0.0.1:$sched_port/healthz"
wait_for kwok 60 kc wait --for=condition=Ready "node/$node_name" --timeout=1s
# Pods need the namespace's default ServiceAccount, made by the controller-manager.
wait_for kube-controller-manager 60 kc get serviceaccount default -n default

done_at=$(date +%s%3N)
secs() { printf '%d.%01d' $(( $1 / 1000 )) $(( ($1 % 1000) / 100 )); }
log "apiserver /readyz after $(secs $((ready_at - started)))s; cluster ready after $(secs $((done_at - started)))s (node $node_name Ready)"
log "kubeconfig: $kubeconfig"
