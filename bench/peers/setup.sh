#!/usr/bin/env bash
# Installs the peers bench/peers/run.py compares laraq with, into a directory of their own
# ($LARAQ_PEERS_DIR, default ~/.cache/laraq-bench-peers; never laraq's dependencies):
#   py/<peer>/   one venv per Python peer, from bench/peers/requirements/<peer>.txt (pinned; one venv
#                each because their redis-py ranges exclude each other: arq <6, kombu >=6.4, saq <8)
#   node/        BullMQ and ioredis from npm, pinned in bench/peers/package.json
#   status.txt   one line per peer: ok, or skipped and why (run.py reads it)
# Sidekiq is Debian's ruby-sidekiq (apt-get install when root, else says how); artisan is PHP with
# Debian's Laravel 8, as bench/run.py uses (scripts/setup installs those). Idempotent: a peer whose
# install matches its pins is left as it is. A peer that cannot be installed is reported and skipped;
# the script exits 0 unless --strict (then 1 when any peer was skipped).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${LARAQ_PEERS_DIR:-$HOME/.cache/laraq-bench-peers}"
strict=0
[ "${1:-}" = "--strict" ] && strict=1
mkdir -p "$dir/py" "$dir/node"
status="$dir/status.txt.new"
: > "$status"
say() { echo "peers setup: $*"; }
record() { echo "$1 $2" >> "$status"; say "$1: $2"; }
py="${LARAQ_PEERS_PYTHON:-python3}"

for req in "$here"/requirements/*.txt; do
  peer="$(basename "$req" .txt)"
  venv="$dir/py/$peer"
  if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.txt"; then
    record "$peer" "ok (already installed: $(grep -i "^$peer==" "$req"))"
    continue
  fi
  rm -rf "$venv"
  if ! out="$("$py" -m venv "$venv" 2>&1)"; then
    record "$peer" "skipped: python3 -m venv failed: $(echo "$out" | tail -1)"
    continue
  fi
  if out="$("$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" 2>&1)"; then
    cp "$req" "$venv/requirements.txt"
    record "$peer" "ok (installed $(grep -i "^$peer==" "$req"))"
  else
    record "$peer" "skipped: pip install failed: $(echo "$out" | grep -v '^ *$' | tail -1)"
  fi
done

apt_install() {  # root on Debian: apt-get install "$@" (an update first when the lists are stale)
  [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 || return 1
  say "installing $* (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1; }
}

node_dir="$dir/node"
command -v npm >/dev/null 2>&1 || apt_install nodejs npm
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  record bullmq "skipped: node and npm not found (as root: apt-get install nodejs npm)"
elif [ -f "$node_dir/node_modules/bullmq/package.json" ] && cmp -s "$here/package.json" "$node_dir/package.json"; then
  record bullmq "ok (already installed: bullmq $(node -p "require('$node_dir/node_modules/bullmq/package.json').version"))"
else
  cp "$here/package.json" "$node_dir/package.json"
  if out="$(cd "$node_dir" && npm install --no-audit --no-fund --no-save --loglevel=error 2>&1)"; then
    record bullmq "ok (installed bullmq $(node -p "require('$node_dir/node_modules/bullmq/package.json').version"))"
  else
    rm -f "$node_dir/package.json"
    record bullmq "skipped: npm install failed: $(echo "$out" | grep -v '^ *$' | tail -1)"
  fi
fi

command -v sidekiq >/dev/null 2>&1 || apt_install ruby-sidekiq
if command -v sidekiq >/dev/null 2>&1; then
  record sidekiq "ok ($(dpkg-query -W -f='ruby-sidekiq ${Version}' ruby-sidekiq 2>/dev/null || echo sidekiq))"
elif [ "$(id -u)" = "0" ]; then
  record sidekiq "skipped: apt-get install ruby-sidekiq failed"
else
  record sidekiq "skipped: not installed (as root: apt-get install ruby-sidekiq)"
fi

if command -v php >/dev/null 2>&1 && [ -f /usr/share/php/Illuminate/autoload.php ]; then
  record artisan "ok ($(php -r 'echo PHP_VERSION;'), Laravel $(php -r "require '/usr/share/php/Illuminate/autoload.php'; echo Illuminate\\Foundation\\Application::VERSION;"))"
else
  record artisan "skipped: PHP or Debian's Laravel 8 missing (bash scripts/setup installs them)"
fi

mv "$status" "$dir/status.txt"
say "done: $dir (status in $dir/status.txt)"
if [ $strict -eq 1 ] && grep -q " skipped:" "$dir/status.txt"; then exit 1; fi
exit 0
