# Sourced by the other scripts: puts a working `uv` in $UV, installing it into ./.tools if needed.
# It never installs anything outside this folder, so it works on Debian's externally managed Python.
set -euo pipefail
if command -v uv >/dev/null 2>&1; then
  UV=uv
elif python3 -m uv --version >/dev/null 2>&1; then
  UV="python3 -m uv"
else
  if [ ! -x .tools/bin/uv ]; then
    echo "Installing uv into ./.tools (once)..." >&2
    python3 -m venv .tools
    .tools/bin/python -m pip install --quiet --disable-pip-version-check uv
  fi
  UV=.tools/bin/uv
fi
# Workspace sources pin every call4agents package to this folder (an unrelated project owns the
# name on PyPI); --locked refuses to run if uv.lock and pyproject.toml disagree.
$UV sync --quiet --locked --all-packages
