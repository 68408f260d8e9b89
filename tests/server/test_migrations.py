"""The Alembic migrations build exactly the schema the models describe, on both databases,
and running them again is a no-op (the server runs them at every start)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from gpupool.server import migrate
from gpupool.server.db import Base, make_engine


def test_migrations_match_the_models(database_url: str) -> None:
    engine = make_engine(database_url)
    migrate.upgrade(engine)
    migrate.upgrade(engine)
    with engine.connect() as connection:
        context = MigrationContext.configure(connection)
        assert compare_metadata(context, Base.metadata) == []
        assert context.get_current_revision() is not None
    assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    engine.dispose()
