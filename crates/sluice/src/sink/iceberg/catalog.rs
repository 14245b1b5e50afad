//! The SQL catalog in PostgreSQL: the JDBC layout that Java's `JdbcCatalog` and pyiceberg's
//! `SqlCatalog` share (tables `iceberg_tables` and `iceberg_namespace_properties`, a row per
//! table whose `metadata_location` names the current metadata file).
//!
//! Written here over tokio-postgres rather than taken from `iceberg-catalog-sql`, for two
//! reasons: that crate reaches PostgreSQL through sqlx's `Any` driver (a second PostgreSQL
//! client, without the TLS files, password files and timeouts `pg_connect` gives every other
//! connection of sluice), and its `update_table` rebases nothing but also pins nothing: a
//! writer cannot say "commit on top of the metadata I checked". Here a commit is a
//! compare-and-set of `metadata_location` against the metadata the writer read, and a lost
//! race is an error that is not retried (`retryable: false`, so the `iceberg` crate's
//! transaction does not rebase the snapshot onto a newer table in silence): the writer reads
//! the table again and decides (`client::Pinned` commits the crate's transactions that way).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use iceberg::io::FileIO;
use iceberg::spec::{TableMetadata, TableMetadataBuilder};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result, Runtime,
    TableCommit, TableCreation, TableIdent,
};
use tokio_postgres::Client;

use crate::pg_connect::PgConnectConfig;

/// The catalog's table of tables (Java's `JdbcCatalog` V1 layout, pyiceberg's too).
const CREATE_TABLES: &str = "CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name VARCHAR(255) NOT NULL,
    table_namespace VARCHAR(255) NOT NULL,
    table_name VARCHAR(255) NOT NULL,
    metadata_location VARCHAR(1000),
    previous_metadata_location VARCHAR(1000),
    iceberg_type VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name))";
/// The catalog's namespace properties.
const CREATE_NAMESPACES: &str = "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name VARCHAR(255) NOT NULL,
    namespace VARCHAR(255) NOT NULL,
    property_key VARCHAR(255) NOT NULL,
    property_value VARCHAR(1000),
    PRIMARY KEY (catalog_name, namespace, property_key))";

/// The SQL catalog in a PostgreSQL database.
pub struct PgCatalog {
    connect: PgConnectConfig,
    name: String,
    warehouse: String,
    file_io: FileIO,
    /// The session (reconnected when closed); its tables created once.
    client: Mutex<Option<Arc<Client>>>,
}

impl std::fmt::Debug for PgCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCatalog")
            .field("name", &self.name)
            .field("warehouse", &self.warehouse)
            .finish_non_exhaustive()
    }
}

fn sql_error(what: &str, error: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::new(ErrorKind::Unexpected, format!("the SQL catalog: {what}")).with_source(error)
}

fn conflict(table: &TableIdent) -> Error {
    Error::new(
        ErrorKind::CatalogCommitConflicts,
        format!("table {table} changed since it was read: the commit lost the race"),
    )
    .with_retryable(false)
}

fn unsupported(what: &str) -> Error {
    Error::new(
        ErrorKind::FeatureUnsupported,
        format!("sluice's SQL catalog does not {what}"),
    )
}

impl PgCatalog {
    /// The catalog `name` in the database of `connect`, new tables under `warehouse`
    /// (`file:///path` or `s3://bucket/prefix`), reached through `file_io`.
    pub fn new(connect: PgConnectConfig, name: String, warehouse: String, file_io: FileIO) -> Self {
        Self {
            connect,
            name,
            warehouse: warehouse.trim_end_matches('/').to_owned(),
            file_io,
            client: Mutex::new(None),
        }
    }

    /// The session, connected (and the catalog's tables created) when there is none.
    async fn client(&self) -> Result<Arc<Client>> {
        {
            let guard = self
                .client
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(client) = guard.as_ref()
                && !client.is_closed()
            {
                return Ok(Arc::clone(client));
            }
        }
        let (client, _task) = crate::pg_connect::connect_sql(&self.connect)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!(
                        "cannot connect to the SQL catalog's database {}",
                        crate::pg_connect::describe_host(&self.connect.pg)
                    ),
                )
                .with_source(e)
            })?;
        client
            .batch_execute(&format!("{CREATE_TABLES}; {CREATE_NAMESPACES}"))
            .await
            .map_err(|e| sql_error("cannot create the catalog's tables", e))?;
        let client = Arc::new(client);
        *self
            .client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&client));
        Ok(client)
    }

    /// The current metadata location of `table`, `None` when the catalog has no such table.
    async fn metadata_location(&self, table: &TableIdent) -> Result<Option<String>> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT metadata_location FROM iceberg_tables
                 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3
                   AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)",
                &[&self.name, &table.namespace().join("."), &table.name()],
            )
            .await
            .map_err(|e| sql_error("cannot read a table's row", e))?;
        Ok(row.and_then(|row| row.get::<_, Option<String>>(0)))
    }

    fn table(&self, ident: TableIdent, location: String, metadata: TableMetadata) -> Result<Table> {
        Table::builder()
            .file_io(self.file_io.clone())
            .identifier(ident)
            .metadata_location(location)
            .metadata(metadata)
            .runtime(Runtime::try_current()?)
            .build()
    }

    /// Applies `commit` on top of `base` and makes the result current, if `base` is still
    /// the current metadata (compare-and-set); otherwise a conflict that is not retried.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::CatalogCommitConflicts`] when another commit came first; the catalog's or
    /// the file system's errors.
    pub async fn commit_on(&self, base: Table, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let base_location = base.metadata_location_result()?.to_owned();
        let staged = commit.apply(base)?;
        self.swap(&ident, base_location, staged).await
    }

    /// Makes `metadata` (built on `base`'s) the current metadata of `base`'s table if `base`
    /// is still current (compare-and-set); otherwise a conflict that is not retried. For
    /// commits the `iceberg` crate's transactions cannot express (a snapshot that adds delete
    /// files: the Iceberg sink's upsert mode).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::CatalogCommitConflicts`] when another commit came first; the catalog's or
    /// the file system's errors.
    pub async fn commit_metadata(&self, base: &Table, metadata: TableMetadata) -> Result<Table> {
        let ident = base.identifier().clone();
        let base_location = base.metadata_location_result()?.to_owned();
        let staged_location = MetadataLocation::from_str(&base_location)?
            .with_next_version()
            .with_new_metadata(&metadata)
            .to_string();
        let staged = self.table(ident.clone(), staged_location, metadata)?;
        self.swap(&ident, base_location, staged).await
    }

    /// Writes `staged`'s metadata file and points the catalog's row at it if the row still
    /// points at `base_location`.
    async fn swap(
        &self,
        ident: &TableIdent,
        base_location: String,
        staged: Table,
    ) -> Result<Table> {
        let staged_location = MetadataLocation::from_str(staged.metadata_location_result()?)?;
        staged
            .metadata()
            .write_to(staged.file_io(), &staged_location)
            .await?;
        let staged_location = staged_location.to_string();
        let client = self.client().await?;
        let updated = client
            .execute(
                "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2
                 WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5
                   AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)
                   AND metadata_location = $2",
                &[
                    &staged_location,
                    &base_location,
                    &self.name,
                    &ident.namespace().join("."),
                    &ident.name(),
                ],
            )
            .await
            .map_err(|e| sql_error("cannot update a table's row", e))?;
        if updated == 0 {
            // The metadata file written above is referenced by nothing; left for the
            // orphan-file maintenance.
            return Err(conflict(ident));
        }
        Ok(staged)
    }
}

#[async_trait]
impl Catalog for PgCatalog {
    async fn list_namespaces(
        &self,
        _parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        Err(unsupported("list namespaces"))
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        let client = self.client().await?;
        let name = namespace.join(".");
        // "exists" = "true": the row Java's JdbcCatalog and pyiceberg write for a namespace
        // without properties. Concurrent creators agree (ON CONFLICT).
        let mut rows = vec![("exists".to_owned(), "true".to_owned())];
        rows.extend(properties.clone());
        for (key, value) in rows {
            client
                .execute(
                    "INSERT INTO iceberg_namespace_properties
                       (catalog_name, namespace, property_key, property_value)
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                    &[&self.name, &name, &key, &value],
                )
                .await
                .map_err(|e| sql_error("cannot create a namespace", e))?;
        }
        Ok(Namespace::with_properties(namespace.clone(), properties))
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        if self.namespace_exists(namespace).await? {
            Ok(Namespace::new(namespace.clone()))
        } else {
            Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("no namespace {}", namespace.join(".")),
            ))
        }
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let client = self.client().await?;
        let name = namespace.join(".");
        let row = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM iceberg_namespace_properties
                                 WHERE catalog_name = $1 AND namespace = $2)
                     OR EXISTS (SELECT 1 FROM iceberg_tables
                                 WHERE catalog_name = $1 AND table_namespace = $2)",
                &[&self.name, &name],
            )
            .await
            .map_err(|e| sql_error("cannot read a namespace", e))?;
        Ok(row.get(0))
    }

    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> Result<()> {
        Err(unsupported("update namespaces"))
    }

    async fn drop_namespace(&self, _namespace: &NamespaceIdent) -> Result<()> {
        Err(unsupported("drop namespaces"))
    }

    async fn list_tables(&self, _namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        Err(unsupported("list tables"))
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        let location = match &creation.location {
            Some(location) => location.clone(),
            None => format!(
                "{}/{}/{}",
                self.warehouse,
                namespace.join("/"),
                creation.name
            ),
        };
        let creation = TableCreation {
            location: Some(location.clone()),
            ..creation
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(location, &metadata);
        metadata.write_to(&self.file_io, &metadata_location).await?;
        let metadata_location = metadata_location.to_string();
        let client = self.client().await?;
        let inserted = client
            .execute(
                "INSERT INTO iceberg_tables
                   (catalog_name, table_namespace, table_name, metadata_location, iceberg_type)
                 VALUES ($1, $2, $3, $4, 'TABLE') ON CONFLICT DO NOTHING",
                &[
                    &self.name,
                    &namespace.join("."),
                    &ident.name(),
                    &metadata_location,
                ],
            )
            .await
            .map_err(|e| sql_error("cannot insert a table's row", e))?;
        if inserted == 0 {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {ident} already exists"),
            ));
        }
        self.table(ident, metadata_location, metadata)
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        let Some(location) = self.metadata_location(table).await? else {
            return Err(Error::new(
                ErrorKind::TableNotFound,
                format!("no table {table} in catalog {}", self.name),
            ));
        };
        let metadata = TableMetadata::read_from(&self.file_io, &location).await?;
        self.table(table.clone(), location, metadata)
    }

    async fn drop_table(&self, _table: &TableIdent) -> Result<()> {
        Err(unsupported("drop tables"))
    }

    async fn purge_table(&self, _table: &TableIdent) -> Result<()> {
        Err(unsupported("purge tables"))
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        Ok(self.metadata_location(table).await?.is_some())
    }

    async fn rename_table(&self, _src: &TableIdent, _dest: &TableIdent) -> Result<()> {
        Err(unsupported("rename tables"))
    }

    async fn register_table(
        &self,
        _table: &TableIdent,
        _metadata_location: String,
    ) -> Result<Table> {
        Err(unsupported("register tables"))
    }

    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let current = self.load_table(commit.identifier()).await?;
        self.commit_on(current, commit).await
    }
}
