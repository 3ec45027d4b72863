# Sourced by scripts/test and scripts/demo: makes .venv with the project installed and,
# as root on a machine without one, installs Debian's ZooKeeper.
set -euo pipefail
extras="${1:-test}"
if [ -z "${SEMAPHORE_RECIPES_TEST_ZOOKEEPER:-}" ] && [ ! -f /usr/share/java/zookeeper.jar ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ZooKeeper (apt-get install zookeeper)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
  else
    echo "!! no ZooKeeper: run 'sudo apt-get install -y zookeeper' or set SEMAPHORE_RECIPES_TEST_ZOOKEEPER=host:port" >&2
  fi
fi
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$python" -m venv .venv
fi
echo "== installing semaphore-recipes[$extras] into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$extras]"
export PATH="$PWD/.venv/bin:$PATH"
