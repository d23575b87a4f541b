"""Tables addressed by catalog name (`delta.table_name = "db.events"`): their location, and their entry.

Called at the start of each job that writes or reads the config's tables (the ingest's start-up
checks, the replay, the status, the maintenance) through `located_routes`, which resolves the
config's routes (`sharelake.config.routes.resolve_routes`) with `locate_table`, and by `DeltaWriter` after
a commit. Everything below the config works on a table's location, as for a path table; a name only
decides where that is:

- a table the session's catalog knows: its location (`DESCRIBE DETAIL`), refused unless Delta;
- a new one: the catalog's default location for it (the database's folder + the table's name, what
  a managed table would get), refused with one line when the database does not exist. The first
  commit creates the Delta table there, with the same properties as a path table, and the writer
  then enters it in the catalog (`CREATE TABLE IF NOT EXISTS ... USING DELTA LOCATION`): a table
  registered by location, which `DROP TABLE` leaves in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from sharelake.config.routes import Routes, resolve_routes
from sharelake.failures.errors import ConfigError, one_line

if TYPE_CHECKING:
    from sharelake.config.settings import SharelakeConfig


def quote(name: str) -> str:
    """`db.events` as `db`.`events` for SQL."""
    return ".".join(f"`{part.replace('`', '``')}`" for part in name.split("."))


def located_routes(spark: SparkSession, cfg: SharelakeConfig) -> Routes:
    """The routes of `cfg`, each table it names in the catalog located in `spark`'s (ConfigError, one
    line, when one cannot be)."""
    return resolve_routes(cfg, lambda name, key: locate_table(spark, name, key))


def locate_table(spark: SparkSession, name: str, key: str) -> str:
    """Where the table `name` is, or will be created; ConfigError (one line) when it cannot be."""
    parts = name.split(".")
    if not all(parts) or len(parts) > 3:
        raise ConfigError(f"{key} = {name!r}: not a table name; write it as db.table (or catalog.db.table)")
    try:
        exists = spark.catalog.tableExists(name)
    except Exception as e:  # noqa: BLE001 - the metastore is the dependency that failed
        raise ConfigError(f"{key} = {name!r}: the catalog could not be asked ({one_line(e, 200)})") from None
    if exists:
        detail = spark.sql(f"DESCRIBE DETAIL {quote(name)}").collect()[0]
        if str(detail["format"]).lower() != "delta":
            raise ConfigError(
                f"{key} = {name!r}: the catalog's table is {detail['format']}, not Delta; name a Delta table"
            )
        return str(detail["location"])
    if len(parts) == 3:
        raise ConfigError(
            f"{key} = {name!r}: no such table; Sharelake creates new tables only in the session catalog "
            "(db.table): create it in its catalog first, or use a two-part name"
        )
    database = parts[0] if len(parts) == 2 else spark.catalog.currentDatabase()
    if not spark.catalog.databaseExists(database):
        raise ConfigError(
            f"{key} = {name!r}: database {database} does not exist in the session's catalog; "
            f"create it (CREATE DATABASE {database}) or fix the name"
        )
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    ident = jvm.org.apache.spark.sql.catalyst.TableIdentifier.apply(parts[-1], jvm.scala.Option.apply(database))
    return str(spark._jsparkSession.sessionState().catalog().defaultTablePath(ident))


def register_table(spark: SparkSession, name: str, location: str) -> None:
    """Enter the Delta table at `location` in the catalog as `name` (nothing when it is there)."""
    literal = location.replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {quote(name)} USING DELTA LOCATION '{literal}'")
