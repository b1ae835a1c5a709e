#!/usr/bin/env bash
# Checks the sample Kubernetes manifests under docs/deploy/kubernetes/ offline:
# - against the Kubernetes API's own schemas, strictly (no unknown field), with
#   kubernetes-validate from PyPI (its schemas ship in the package; installed once into
#   ~/.cache/systemone/kubernetes-validate);
# - every SYSTEMONE_* variable they set is one the service reads (docs/reference/flags.md,
#   generated from the code and checked by `systemone docs --check`);
# - every systemone container has its liveness probe on /healthz and readiness on /readyz.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${SYSTEMONE_CACHE:-$HOME/.cache/systemone}/kubernetes-validate"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet "kubernetes-validate==1.37.0" >&2
fi
"$venv/bin/kubernetes-validate" --strict --quiet docs/deploy/kubernetes/*.yaml
"$venv/bin/python" - docs/deploy/kubernetes/*.yaml <<'PY'
import re, sys, yaml
flags = open("docs/reference/flags.md").read()
known = set(re.findall(r"`(SYSTEMONE_[A-Z0-9_]+)`", flags))
bad = []
for path in sys.argv[1:]:
    for doc in yaml.safe_load_all(open(path)):
        if doc["kind"] != "Deployment":
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            if not c["image"].startswith("registry.example/systemone"):
                continue
            for env in c.get("env", []):
                if env["name"].startswith("SYSTEMONE_") and env["name"] not in known:
                    bad.append(f"{path}: {env['name']} is not a variable the service reads")
            live = c.get("livenessProbe", {}).get("httpGet", {}).get("path")
            ready = c.get("readinessProbe", {}).get("httpGet", {}).get("path")
            if (live, ready) != ("/healthz", "/readyz"):
                bad.append(f"{path}: probes {live}, {ready}: want /healthz and /readyz")
for line in bad:
    print("check-manifests:", line, file=sys.stderr)
if bad:
    sys.exit(1)
print(f"check-manifests: {len(sys.argv) - 1} manifests valid (Kubernetes 1.37 schemas, strict), "
      "their variables and probes the service's")
PY
