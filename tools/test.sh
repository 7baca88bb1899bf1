#!/usr/bin/env bash
# The project's one test command (README quick start; .ci/run calls it).
# Rust: fmt, clippy -D warnings, unit tests. Python: build the abi3 wheel, install it
# with the test extras into a fresh venv, run pytest's CPU tiers (unit + Triton
# interpreter). The gpu tier needs CUDA: it runs on the GPU machine
# (benchmarks/gpu_check.sh), and is deselected here by marker, never skipped silently.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
VENV=${FOURCAST_TEST_VENV:-$ROOT/.venv-test}

echo "== cargo fmt / clippy / test"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings
cargo test --workspace -q

echo "== build wheel"
rm -rf "$ROOT/target/wheels"
$PY -m pip install -q "maturin>=1.7,<2"
$PY -m maturin build --release -q -o "$ROOT/target/wheels"
WHEEL=$(ls "$ROOT"/target/wheels/fourcast-*.whl)

echo "== fresh venv with test extras"
rm -rf "$VENV"
$PY -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "${WHEEL}[test]"

echo "== pytest (CPU tiers)"
cd "$ROOT/tests"  # import fourcast from the installed wheel, not ../python
set +e
"$VENV/bin/python" -m pytest -c "$ROOT/pyproject.toml" --rootdir "$ROOT" -m "not gpu" -q -p no:cacheprovider "$ROOT/tests"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit $rc
