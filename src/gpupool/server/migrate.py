"""Bring a database to the newest schema with the packaged Alembic migrations."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, text

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


STARTUP_LOCK = 0x67707570
"""PostgreSQL advisory lock held while a server migrates and bootstraps: replicas starting
together on one database (Kubernetes, 2 replicas) take turns instead of racing."""


def lock_for_startup(connection: Connection) -> None:
    """On PostgreSQL, wait for the startup lock (released when the transaction ends). Another
    replica's migration may take long: no statement timeout for this transaction."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET LOCAL statement_timeout = 0"))
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": STARTUP_LOCK})


def upgrade(engine: Engine) -> None:
    """Apply every migration not yet applied. Safe to run at every start, and by several
    servers at once on PostgreSQL."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # A migration that rebuilds a table drops the old one, and with foreign keys on
            # that would cascade (memberships) or fail (workloads). SQLite reads this pragma
            # only outside a transaction, so on the driver's connection before BEGIN.
            _sqlite_pragma(connection, "PRAGMA foreign_keys=OFF")
        try:
            with connection.begin():
                lock_for_startup(connection)
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
                if sqlite:
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                    if broken:
                        raise RuntimeError(f"the migration broke foreign keys: {broken[:5]}")
        finally:
            if sqlite:
                _sqlite_pragma(connection, "PRAGMA foreign_keys=ON")


def _sqlite_pragma(connection: Connection, pragma: str) -> None:
    driver = connection.connection.driver_connection
    assert driver is not None
    driver.execute(pragma)
