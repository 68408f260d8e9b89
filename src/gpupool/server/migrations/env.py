"""Alembic environment: runs migrations on the connection or URL that `gpupool.server.migrate`
passes in; never reads a config file of its own."""

from __future__ import annotations

from alembic import context

from gpupool.server.db import Base, make_engine

config = context.config
target_metadata = Base.metadata


def _run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


_run()
