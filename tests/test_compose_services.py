"""Compose services of other images (``image: redis``, ``image: postgres``) beside a task.

The fixture under ``tests/fixtures/compose-services`` is a Harbor task whose
``docker-compose.yaml`` puts Redis (with a ``--requirepass`` command) and PostgreSQL
(user, password and database from its environment) next to the agent's container; its
tests and its solution talk to both through ``redis-cli`` and ``psql``. The services run
on Debian root file systems of their own (``tackroom/images/services.py``), built once
by ``mmdebstrap`` and cached in ``$TACKROOM_CACHE/images`` like the task bases.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import import_rows, run_cli

from tackroom.sandbox import sandbox_available
from tackroom.suites.terminal.compose import read_compose
from tackroom.suites.terminal.importer import import_tasks

FIXTURES = Path(__file__).parent / "fixtures" / "compose-services"

needs_builds = pytest.mark.skipif(
    not sandbox_available() or os.geteuid() != 0 or shutil.which("mmdebstrap") is None,
    reason="building task environments and service images needs root, bubblewrap and "
           "mmdebstrap (make setup installs them as root)")


def _task(root: Path, name: str, compose: str, dockerfile: str = "FROM debian:bookworm-slim\n"
          ) -> Path:
    """A minimal Harbor task whose tests pass only once ``/app/done`` exists."""
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Create /app/done.\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile + "WORKDIR /app\n")
    (d / "environment" / "docker-compose.yaml").write_text(compose)
    (d / "tests" / "test.sh").write_text(
        "test -e /app/done && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n")
    (d / "solution" / "solve.sh").write_text("touch /app/done\n")
    return d




def test_mapped_images_are_read_with_their_settings_and_the_rest_refused(tmp_path):
    compose = tmp_path / "docker-compose.yaml"
    compose.write_text(
        "services:\n  client:\n    build: .\n"
        "  sql:\n    image: docker.io/library/mysql:8.0\n"
        "    environment: [MYSQL_ROOT_PASSWORD=pw, MYSQL_DATABASE=shop]\n"
        "  web:\n    image: nginx\n    ports: ['8080:80']\n")
    read = read_compose(compose)
    assert read.unsupported is None
    services = {s.name: s for s in read.services}
    assert services["sql"].runs is not None and services["sql"].runs.name == "mariadb"
    assert services["sql"].env == {"MYSQL_ROOT_PASSWORD": "pw", "MYSQL_DATABASE": "shop"}
    assert services["web"].runs is not None and services["web"].ports == (80,)
    for spec, refused in [
        ("image: elasticsearch:8.11.0", "runs image elasticsearch:8.11.0"),
        ("image: redis\n    command: ['sh', '-c', 'redis-server']", "command other than"),
        ("image: nginx\n    volumes: ['./site.conf:/etc/nginx/conf.d/site.conf']",
         "mounts ./site.conf"),
    ]:
        compose.write_text(f"services:\n  client:\n    build: .\n  other:\n    {spec}\n")
        reason = read_compose(compose).unsupported
        assert reason is not None and refused in reason, reason


@needs_builds
@pytest.mark.slow  # CLI subprocesses; builds on a cold cache
def test_redis_and_postgres_beside_a_task_run_its_oracle_and_an_unmapped_image_is_skipped(
        tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES, src)
    _task(src, "search-index", "services:\n  main:\n    build: .\n"
          "  search:\n    image: elasticsearch:8.11.0\n")
    # The first run builds the client's image and the two services' root file systems.
    p = run_cli("tasks", "import", str(src), cwd=tmp_path, timeout=1800,
                env_extra={"TACKROOM_TASKS": str(tmp_path / "tasks"), "COLUMNS": "240"})
    assert p.returncode == 0, p.stderr + p.stdout
    rows = import_rows(p.stdout)
    _, kept, environment, untouched, oracle, *_ = rows["cache-and-db"]
    # Untouched, both services answer and the tests fail; solved, both hold 42.
    assert (kept, untouched, oracle) == ("yes", "fails", "passes"), p.stdout + p.stderr
    assert environment in ("built", "cached")
    assert rows["search-index"][1] == "skipped", p.stdout
    assert "service 'search' runs image elasticsearch:8.11.0" in p.stdout, p.stdout
    assert "nginx (any tag)" in p.stdout, p.stdout


@needs_builds
@pytest.mark.slow  # CLI subprocesses; builds on a cold cache
def test_a_service_that_never_becomes_ready_is_an_infra_error_naming_it_and_its_check(
        tmp_path):
    _task(tmp_path / "src", "bad-db", "services:\n  main:\n    build: .\n  db:\n"
          "    image: postgres:16\n    environment:\n"
          "      POSTGRES_INITDB_ARGS: --no-such-option\n")
    result, = import_tasks(tmp_path / "src", tmp_path / "store")
    assert not result.imported
    reason = result.reason
    assert reason.startswith("check failed:") and "service 'db' (postgres:16)" in reason, reason
    assert "`pg_isready`" in reason and "--no-such-option" in reason, reason
    assert "\n" not in reason


@needs_builds
def test_under_docker_the_services_are_containers_on_the_episodes_network(docker_daemon,
                                                                          tmp_path):
    """The same task with ``--sandbox docker``: the services' root file systems imported into
    the daemon, each a container in the episode container's network namespace."""
    p = run_cli("tasks", "import", str(FIXTURES), "--sandbox", "docker", cwd=tmp_path,
                timeout=1800,
                env_extra={"TACKROOM_TASKS": str(tmp_path / "tasks"), "COLUMNS": "240"})
    assert p.returncode == 0, p.stderr + p.stdout
    _, kept, environment, untouched, oracle, *_ = import_rows(p.stdout)["cache-and-db"]
    assert (kept, environment, untouched, oracle) == ("yes", "docker", "fails", "passes"), \
        p.stdout + p.stderr
