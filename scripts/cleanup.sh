# Sourced by stack.sh and soak.sh: remove what one run created on the shared services, by its names.
#   cleanup_run <pg server url> <database> <prefix>
# drops the database, deletes every Redis key under the prefix and the RabbitMQ queues and exchanges
# whose names start with it (the shop's topology always; with rabbitmqctl on the PATH, also whatever
# else the run declared under the prefix, such as the lab's own topologies). Best effort, bounded by
# timeouts: it runs from an EXIT trap, on failures and Ctrl-C too. Needs $bin/orders (orders teardown).
cleanup_run() {
  local server="$1" db="$2" prefix="$3" names=()
  timeout 30 psql "$server/postgres?sslmode=disable" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 ||
    echo "cleanup: database $db not dropped" >&2
  if command -v rabbitmqctl >/dev/null 2>&1; then
    mapfile -t names < <({ timeout 30 rabbitmqctl -q --no-table-headers list_queues name
                           timeout 30 rabbitmqctl -q --no-table-headers list_exchanges name; } 2>/dev/null |
                         awk -v p="$prefix" 'index($0, p) == 1')
  fi
  REDIS_KEY_PREFIX="$prefix" AMQP_NAME_PREFIX="$prefix" LOG_LEVEL=warn timeout 60 "$bin/orders" teardown "${names[@]}" ||
    echo "cleanup: Redis keys or RabbitMQ objects under $prefix not all removed" >&2
}
