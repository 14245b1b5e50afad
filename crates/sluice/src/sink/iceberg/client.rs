//! The catalog a sink writes through: the SQL catalog in PostgreSQL ([`PgCatalog`],
//! `catalog_uri = "postgres://…"`) or a REST catalog ([`RestCatalog`], `"http(s)://…"`), with
//! the warehouse's file IO ([`super::storage`]). Both commit only on top of the metadata the
//! writer read: the SQL catalog by a compare-and-set of the metadata pointer, the REST
//! catalog by the requirements of its update request; a lost race is
//! [`ErrorKind::CatalogCommitConflicts`], never retried in silence.

use std::collections::HashMap;

use async_trait::async_trait;
use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, Namespace, NamespaceIdent, Result, TableCommit, TableCreation,
    TableIdent,
};

use super::catalog::PgCatalog;
use super::rest::RestCatalog;

/// The SQL or the REST catalog.
#[derive(Debug)]
pub enum IcebergCatalog {
    /// The SQL (JDBC-layout) catalog in PostgreSQL.
    Sql(Box<PgCatalog>),
    /// A REST catalog.
    Rest(Box<RestCatalog>),
}

impl IcebergCatalog {
    /// The table.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::TableNotFound`]; the catalog's errors.
    pub async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        match self {
            Self::Sql(catalog) => catalog.load_table(ident).await,
            Self::Rest(catalog) => catalog.load_table(ident).await,
        }
    }

    /// Whether the namespace exists.
    ///
    /// # Errors
    ///
    /// The catalog's errors.
    pub async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        match self {
            Self::Sql(catalog) => catalog.namespace_exists(namespace).await,
            Self::Rest(catalog) => catalog.namespace_exists(namespace).await,
        }
    }

    /// Creates the namespace (an existing one is fine).
    ///
    /// # Errors
    ///
    /// The catalog's errors.
    pub async fn create_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        match self {
            Self::Sql(catalog) => catalog
                .create_namespace(namespace, HashMap::new())
                .await
                .map(|_| ()),
            Self::Rest(catalog) => catalog.create_namespace(namespace).await,
        }
    }

    /// Creates the table.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::TableAlreadyExists`]; the catalog's errors.
    pub async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        match self {
            Self::Sql(catalog) => catalog.create_table(namespace, creation).await,
            Self::Rest(catalog) => catalog.create_table(namespace, creation).await,
        }
    }

    /// Makes `metadata` (built on `base`'s) the table's current metadata if `base` is still
    /// current.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::CatalogCommitConflicts`] when another commit came first; the catalog's
    /// errors.
    pub async fn commit_metadata(&self, base: &Table, metadata: TableMetadata) -> Result<Table> {
        match self {
            Self::Sql(catalog) => catalog.commit_metadata(base, metadata).await,
            Self::Rest(catalog) => catalog.commit_metadata(base, &metadata).await,
        }
    }
}

fn unsupported(what: &str) -> Error {
    Error::new(
        ErrorKind::FeatureUnsupported,
        format!("a pinned catalog does not {what}"),
    )
}

/// The catalog as one writer sees it: `table` as it read it. A transaction committed through
/// it builds on that table (the `iceberg` crate's transaction reloads the table before it
/// commits; here the reload returns the pinned table) and commits only if the table is still
/// at that metadata; otherwise the commit fails with a conflict that is not retried.
#[derive(Debug)]
pub struct Pinned<'a> {
    /// The catalog.
    pub catalog: &'a IcebergCatalog,
    /// The table as read.
    pub table: Table,
}

#[async_trait]
impl Catalog for Pinned<'_> {
    async fn list_namespaces(
        &self,
        _parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        Err(unsupported("list namespaces"))
    }

    async fn create_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        Err(unsupported("create namespaces"))
    }

    async fn get_namespace(&self, _namespace: &NamespaceIdent) -> Result<Namespace> {
        Err(unsupported("read namespaces"))
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.catalog.namespace_exists(namespace).await
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
        _namespace: &NamespaceIdent,
        _creation: TableCreation,
    ) -> Result<Table> {
        Err(unsupported("create tables"))
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        if table == self.table.identifier() {
            Ok(self.table.clone())
        } else {
            Err(unsupported("load a table other than the pinned one"))
        }
    }

    async fn drop_table(&self, _table: &TableIdent) -> Result<()> {
        Err(unsupported("drop tables"))
    }

    async fn purge_table(&self, _table: &TableIdent) -> Result<()> {
        Err(unsupported("purge tables"))
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        Ok(table == self.table.identifier())
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

    async fn update_table(&self, mut commit: TableCommit) -> Result<Table> {
        if commit.identifier() != self.table.identifier() {
            return Err(unsupported("commit to a table other than the pinned one"));
        }
        match self.catalog {
            IcebergCatalog::Sql(catalog) => catalog.commit_on(self.table.clone(), commit).await,
            IcebergCatalog::Rest(catalog) => {
                // The transaction's requirements pin the table it read (its UUID, the `main`
                // branch's snapshot): the server refuses the commit if another came first.
                let ident = commit.identifier().clone();
                let requirements = commit.take_requirements();
                let updates = commit.take_updates();
                catalog.commit(&ident, requirements, updates).await
            }
        }
    }
}
