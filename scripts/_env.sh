# Sourced by the other scripts: a virtual environment in .venv with tuna installed in it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "tuna: creating .venv with $($PY --version)" >&2
    "$PY" -m venv .venv
fi
stamp=.venv/.tuna-installed
if [ ! -f "$stamp" ] || [ setup.py -nt "$stamp" ]; then
    echo "tuna: installing tuna and its pinned dependencies into .venv (about a minute)" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test,plots]"
    touch "$stamp"
fi
