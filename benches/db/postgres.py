"""A throwaway PostgreSQL 15 cluster holding the benchmark's two tables, in a temporary directory.

    python3 benches/db/postgres.py      # start one, print its DSN, serve until Ctrl-C, remove it

The cluster runs as the `postgres` system user (initdb refuses root), listens on 127.0.0.1 on a
free port and on a unix socket in its directory, and is pinned to the client core (CPU 1) with
the load generator, so it takes nothing from the server core. fsync, synchronous_commit and
full_page_writes are off: durability is not what is measured, and a crash only loses a
throwaway cluster. Its tables, written from the public description of the test types:

    world   (id integer primary key, randomnumber integer): 10,000 rows, randomnumber 1..10000
    fortune (id integer primary key, message varchar(2048)): the 12 messages of FORTUNES

If the server binaries are missing they are installed from Debian (postgresql-15, or the
distribution's default `postgresql`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benches/, for harness

from harness import CLIENT_CPU, free_port, log  # noqa: E402

PG_USER = "postgres"
DATABASE = "hello_world"
PG_BIN = Path("/usr/lib/postgresql/15/bin")

# Enough for three one-worker servers' pools of 64, or three two-worker ones', all up at once.
MAX_CONNECTIONS = 500

# Our own twelve messages: one with markup that the page must escape, one with Japanese text
# that must come back intact as UTF-8, one with quotes and ampersands.
FORTUNES = [
    "Measure twice, serve once.",
    "A request never made is the fastest request of all.",
    '<script>alert("This should not be displayed in a browser alert box.");</script>',
    "The database waits for no one, and everyone waits for the database.",
    "Every cache is a promise the database never made.",
    "ベンチマークは嘘をつかないが、すべてを語るわけでもない。",
    "An index a day keeps the sequential scan away.",
    "Ampersands & angle brackets < > and \"quotes\" are escaped, 'always'.",
    "Latency is the tax paid on distance.",
    "A connection pool is a queue with better manners.",
    "Numbers without a load average are rumours.",
    "Nothing is as permanent as a temporary benchmark.",
]

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": str(MAX_CONNECTIONS),
    "shared_buffers": "'128MB'",
    # A benchmark's throwaway data: no durability wanted (see the module docstring).
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "logging_collector": "off",
}


def binaries() -> Path:
    """The directory of initdb, pg_ctl and postgres; installs PostgreSQL if there is none."""
    found = find_binaries()
    if found is not None:
        return found
    log("PostgreSQL not found: installing it with apt-get")
    subprocess.run(["apt-get", "update"], check=True, stdout=subprocess.DEVNULL)
    shown = subprocess.run(
        ["apt-cache", "show", "postgresql-15"], capture_output=True, text=True
    ).stdout
    package = "postgresql-15" if "Package: postgresql-15" in shown else "postgresql"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "install", "-y", package], check=True, env=env)
    found = find_binaries()
    if found is None:
        sys.exit(f"installed {package}, but found no initdb under /usr/lib/postgresql")
    return found


def find_binaries() -> Path | None:
    """PostgreSQL 15's binaries, else the newest version's Debian installed."""
    if (PG_BIN / "initdb").exists():
        return PG_BIN
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def schema_sql() -> str:
    fortunes = ",\n".join(f"({i}, {sql_literal(m)})" for i, m in enumerate(FORTUNES, 1))
    return f"""
CREATE TABLE world (
    id integer NOT NULL PRIMARY KEY,
    randomnumber integer NOT NULL DEFAULT 0
);
INSERT INTO world (id, randomnumber)
    SELECT n, 1 + floor(random() * 10000)::integer FROM generate_series(1, 10000) AS n;
CREATE TABLE fortune (
    id integer NOT NULL PRIMARY KEY,
    message varchar(2048) NOT NULL
);
INSERT INTO fortune (id, message) VALUES
{fortunes};
VACUUM ANALYZE;
"""


class Postgres:
    """One cluster: start() makes and starts it, stop() stops it and removes its directory."""

    def __init__(self, cpu: str = CLIENT_CPU) -> None:
        self.cpu = cpu
        self.bin = binaries()
        self.dir: Path | None = None
        self.port = 0

    @property
    def dsn(self) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def data(self) -> Path:
        assert self.dir is not None
        return self.dir / "data"

    @property
    def log_path(self) -> Path:
        assert self.dir is not None
        return self.dir / "postgres.log"

    def as_postgres(self, *argv: str, **kwargs) -> subprocess.CompletedProcess:
        """Runs a command as the postgres user, pinned to the cluster's CPU (which its
        children, the server and every backend, inherit)."""
        command = ["taskset", "-c", self.cpu, "runuser", "-u", PG_USER, "--", *argv]
        return subprocess.run(command, cwd=self.dir, check=True, **kwargs)

    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ferrule-pg-"))
        user = pwd.getpwnam(PG_USER)
        os.chown(self.dir, user.pw_uid, user.pw_gid)
        self.port = free_port()
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        self.as_postgres(
            str(self.bin / "initdb"),
            *("-D", str(self.data), "-U", PG_USER, "--auth=trust", "-E", "UTF8", "--no-locale"),
            **quiet,
        )
        settings = dict(SETTINGS, port=str(self.port))
        settings["unix_socket_directories"] = f"'{self.dir}'"
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write("\n# ferrule's database benchmark\n")
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())
        self.as_postgres(
            str(self.bin / "pg_ctl"),
            *("-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60", "start"),
            **quiet,
        )
        self.psql("postgres", f"CREATE DATABASE {DATABASE} ENCODING 'UTF8' TEMPLATE template0")
        self.psql(DATABASE, schema_sql())

    def psql(self, database: str, sql: str) -> str:
        done = self.as_postgres(
            str(self.bin / "psql"),
            *("-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(self.dir), "-p", str(self.port)),
            *("-U", PG_USER, "-d", database, "-At"),
            input=sql,
            capture_output=True,
            text=True,
            env=dict(os.environ, PGCLIENTENCODING="UTF8"),
        )
        return done.stdout

    def stop(self) -> None:
        if self.dir is None:
            return
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self.as_postgres(
                    str(self.bin / "pg_ctl"),
                    *("-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop"),
                    stdout=subprocess.DEVNULL,
                )
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def running(cpu: str = CLIENT_CPU) -> Iterator[Postgres]:
    """A started cluster for the block, stopped and removed after it, whatever happens."""
    pg = Postgres(cpu)
    try:
        pg.start()
    except subprocess.CalledProcessError as exc:
        detail = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        pg.stop()
        sys.exit(f"PostgreSQL did not start: {exc}\n{detail}{exc.stdout or ''}")
    try:
        yield pg
    finally:
        pg.stop()


def exit_on_sigterm() -> None:
    """Turns SIGTERM and SIGHUP (a timeout, a kill, a closed terminal) into SystemExit, so the
    cluster's `finally` stops it and removes its directory."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))


def main() -> None:
    exit_on_sigterm()
    with running() as pg:
        rows = pg.psql(DATABASE, "SELECT count(*) FROM world; SELECT count(*) FROM fortune;")
        log(f"world and fortune rows: {rows.split()}; log: {pg.log_path}")
        print(pg.dsn, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
