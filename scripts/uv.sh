# Sourced by the other scripts: puts a working `uv` in $UV, installing it into ./.tools if needed.
# It never installs anything outside this folder, so it works on Debian's externally managed Python.
set -euo pipefail
if command -v uv >/dev/null 2>&1; then
  UV=uv
elif python3 -m uv --version >/dev/null 2>&1; then
  UV="python3 -m uv"
else
  if [ ! -x .tools/bin/uv ]; then
    echo "Installing uv into ./.tools (once; the command stays there: .tools/bin/uv)..." >&2
    python3 -m venv .tools
    .tools/bin/python -m pip install --disable-pip-version-check --progress-bar on uv >&2
  fi
  UV=.tools/bin/uv
fi
# Workspace sources pin every call4agents package to this folder (an unrelated project owns the
# name on PyPI); --locked refuses to run if uv.lock and pyproject.toml disagree.
if [ -x .venv/bin/python ]; then
  $UV sync --quiet --locked --all-packages
else
  # The first install downloads every framework the integrations test against: say what and how
  # far (uv prints each step, and a bar per download on a terminal) instead of going quiet.
  echo "Installing the workspace into ./.venv (once; a minute or two on a first download)..." >&2
  $UV sync --locked --all-packages
  echo "Installed: .venv/bin/call4agents and .venv/bin/python (or: source .venv/bin/activate)" >&2
fi
