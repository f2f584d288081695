"""Compose services of other images, mapped to Debian packages that run them as programs.

A task's ``docker-compose.yaml`` may put a database or a web server next to the
container the agent works in (``image: redis``, ``image: postgres:16``). No registry is
reachable, so each such image is stood in for by a Debian root file system holding the
server's packages — built once by ``mmdebstrap`` like the task bases
(:func:`tackroom.images.build.ensure_base`) and cached by content — and a start script
that does what the image's entrypoint does where it matters: reads the image's
environment variables (``POSTGRES_PASSWORD``, ``MYSQL_DATABASE``, …), initialises the
data directory, and runs the server in the foreground on the image's default port. A
readiness check (``pg_isready``, ``redis-cli ping``, …) says when it serves.

The table :data:`SERVICE_IMAGES` is the one place that says which images run; any other
image is refused by :func:`service_image` (``None``) and its task is skipped with the
reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tackroom.images.bases import BaseSpec

#: The Debian release the services' root file systems are made from (current stable).
SUITE = "trixie"


@dataclass(frozen=True)
class ServiceImage:
    """How one image runs as a program on a Debian root file system of its own.

    ``start`` is a bash script run as the root file system's root with the compose
    service's environment; it ends by ``exec``-ing the server in the foreground with its
    arguments (``"$@"``: the compose ``command``'s flags). ``ready`` is a bash command
    run beside it that exits 0 once the server answers; ``check`` names it in messages.
    """

    name: str
    packages: tuple[str, ...]
    port: int
    start: str
    ready: str
    check: str
    #: The programs a compose ``command`` may name first: the rest are the server's flags.
    servers: tuple[str, ...]

    def base(self) -> BaseSpec:
        """The root file system the service runs on (its key changes with its packages)."""
        return BaseSpec(suite=SUITE, packages=self.packages,
                        env={"LANG": "C.UTF-8"})

    def server_args(self, argv: tuple[str, ...]) -> tuple[str, ...] | None:
        """The server's flags from a compose ``command`` (``None``: it runs something else).

        ``redis-server --requirepass x`` and ``--requirepass x`` alike give the flags, as
        the images' entrypoints take both.
        """
        if not argv:
            return ()
        if argv[0].startswith("-"):
            return argv
        if argv[0].rsplit("/", 1)[-1] in self.servers:
            return argv[1:]
        return None


_REDIS = ServiceImage(
    "redis", ("redis-server", "redis-tools"), 6379,
    start="exec redis-server --bind 0.0.0.0 --port 6379 --protected-mode no --save '' "
          "--appendonly no --daemonize no \"$@\"",
    # With --requirepass, PING is refused (NOAUTH) by a server that answers: ready too.
    ready="redis-cli -p 6379 ping 2>&1 | grep -qE 'PONG|NOAUTH'",
    check="redis-cli ping", servers=("redis-server",))

_POSTGRES = ServiceImage(
    "postgres", ("postgresql",), 5432,
    start=r"""set -e
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
auth="${POSTGRES_HOST_AUTH_METHOD:-}"
if [ -z "$auth" ]; then
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then auth=scram-sha-256; else auth=trust; fi
fi
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=/var/run/postgresql/.pw
  printf '%s\n' "${POSTGRES_PASSWORD:-}" > "$pwfile"
  chown postgres "$pwfile"
  # --no-sync: the data lives as long as the episode; syncing it only costs seconds
  as_pg "$bin/initdb" -D "$PGDATA" -U "$user" --auth-local=trust --auth-host="$auth" --no-sync \
    ${POSTGRES_PASSWORD:+--pwfile="$pwfile"} ${POSTGRES_INITDB_ARGS:-} >/dev/null
  rm -f "$pwfile"
  echo "host all all all $auth" >> "$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    printf 'CREATE DATABASE "%s";\n' "$db" | as_pg "$bin/postgres" --single -F -D "$PGDATA" postgres >/dev/null
  fi
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$PGDATA" \
  -c listen_addresses='*' -p 5432 "$@"
""",
    ready="pg_isready -q -h 127.0.0.1 -p 5432",
    check="pg_isready", servers=("postgres",))

# MySQL itself is not in Debian: MariaDB stands in for it (same protocol, same clients).
_MARIADB = ServiceImage(
    "mariadb", ("mariadb-server", "mariadb-client"), 3306,
    start=r"""set -e
root_pw="${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}"
db="${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}"
user="${MARIADB_USER:-${MYSQL_USER:-}}"
pw="${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}"
data=/var/lib/mysql
sq() { printf "'%s'" "$(printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g")"; }
# Debian's package made a data directory at install time; the image starts empty, and so
# does every episode's tree: initialised here, each time, with the image's settings.
rm -rf "$data"
mkdir -p "$data" /run/mysqld
chown mysql:mysql "$data" /run/mysqld
install_db=$(command -v mariadb-install-db || command -v mysql_install_db)
# --force: no name lookup of the host (a sandbox's has no entry anywhere)
"$install_db" --user=mysql --datadir="$data" --skip-test-db --force \
  --auth-root-authentication-method=normal
init=/run/mysqld/init.sql
{
  # root from anywhere, as the images make it (and no other root by address to shadow it)
  echo "DROP USER IF EXISTS 'root'@'127.0.0.1', 'root'@'::1', 'root'@'sandbox';"
  echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $(sq "$root_pw");"
  echo "CREATE USER 'root'@'%' IDENTIFIED BY $(sq "$root_pw");"
  echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
  [ -z "$db" ] || echo "CREATE DATABASE IF NOT EXISTS \`$db\`;"
  if [ -n "$user" ]; then
    echo "CREATE USER $(sq "$user")@'%' IDENTIFIED BY $(sq "$pw");"
    [ -z "$db" ] || echo "GRANT ALL ON \`$db\`.* TO $(sq "$user")@'%';"
  fi
} > "$init"
chown mysql "$init"
# MySQL's own flags (--default-authentication-plugin=...) are unknown to MariaDB: --loose-
# makes it skip what it does not know and apply what it does.
flags=()
for a in "$@"; do
  case "$a" in --loose-*) flags+=("$a") ;; --*) flags+=("--loose-${a#--}") ;; *) flags+=("$a") ;; esac
done
server=$(command -v mariadbd || command -v mysqld)
exec "$server" --user=mysql --datadir="$data" --bind-address=0.0.0.0 --port=3306 \
  --skip-name-resolve --init-file="$init" "${flags[@]}"
""",
    # Without TLS: the client would refuse a passwordless TLS handshake it cannot verify
    # (MariaDB 11's default). A refused login still says the server answers: ready.
    ready="$(command -v mariadb-admin || command -v mysqladmin) ping --skip-ssl -h 127.0.0.1 "
          "-P 3306 --silent >/dev/null 2>&1",
    check="mysqladmin ping", servers=("mysqld", "mariadbd"))

_NGINX = ServiceImage(
    "nginx", ("nginx",), 80,
    start="exec nginx -g 'daemon off;' \"$@\"",
    # An HTTP GET of / answered with any status line.
    ready="exec 3<>/dev/tcp/127.0.0.1/80 && printf 'GET / HTTP/1.0\\r\\nHost: localhost\\r\\n"
          "\\r\\n' >&3 && head -c 5 <&3 | grep -q '^HTTP/'",
    check="HTTP GET /", servers=("nginx",))

#: Image name (no registry, no tag) -> how it runs. The one place that says what runs.
SERVICE_IMAGES: dict[str, ServiceImage] = {
    "redis": _REDIS,
    "postgres": _POSTGRES,
    "mysql": _MARIADB,
    "mariadb": _MARIADB,
    "nginx": _NGINX,
}


def image_name(image: str) -> str:
    """``image`` without its registry prefix (``docker.io/library/``), tag and digest."""
    name = image.strip().split("@", 1)[0].lower()
    name = re.sub(r"^(docker\.io/|index\.docker\.io/)?(library/)?", "", name)
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[:len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    return name


def service_image(image: str) -> ServiceImage | None:
    """How ``image`` (any tag) runs as a service here, or ``None`` when it cannot."""
    return SERVICE_IMAGES.get(image_name(image))
