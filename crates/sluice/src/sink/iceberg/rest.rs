//! The Iceberg REST catalog protocol (`catalog_uri = "http(s)://…"`): the few calls the sink
//! makes — the catalog's config, namespaces, create and load a table, and commit a table
//! update with its requirements — over the `reqwest` client sluice already has.
//!
//! Written here rather than taken from `iceberg-catalog-rest`: that crate commits only a
//! `TableCommit`, which nothing outside the `iceberg` crate can build (its builder is
//! crate-private), so the upsert mode's snapshots — built as metadata, with delete files the
//! crate's transactions cannot add — could not be committed through it; and it brings a
//! second HTTP client (reqwest 0.12). Here a commit sends the updates that turn the metadata
//! the writer read into the metadata it built ([`updates_between`]) with requirements that
//! pin what it read (the table's UUID, the `main` branch's snapshot, the schema and partition
//! spec): the server applies them only if they still hold, else answers 409 — a lost race,
//! reported as a conflict that is not retried here (the writer reads the table again and
//! decides, as with the SQL catalog's compare-and-set). The server writes the metadata file.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use iceberg::io::FileIO;
use iceberg::spec::{SnapshotReference, SnapshotRetention, TableMetadata};
use iceberg::table::Table;
use iceberg::{
    Error, ErrorKind, NamespaceIdent, Result, Runtime, TableCreation, TableIdent, TableRequirement,
    TableUpdate,
};
use serde::Deserialize;

/// Time a catalog call may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A REST catalog.
pub struct RestCatalog {
    /// `<catalog_uri>/v1`.
    base: String,
    warehouse: String,
    token: Option<String>,
    http: reqwest::Client,
    file_io: FileIO,
    /// The path prefix the server's config names (`overrides.prefix`), once read.
    prefix: Mutex<Option<String>>,
}

impl std::fmt::Debug for RestCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestCatalog")
            .field("base", &self.base)
            .field("warehouse", &self.warehouse)
            .finish_non_exhaustive()
    }
}

/// A table as the server answers it (`LoadTableResult`, `CommitTableResponse`).
#[derive(Deserialize)]
struct LoadedTable {
    #[serde(rename = "metadata-location")]
    metadata_location: Option<String>,
    metadata: TableMetadata,
}

/// The server's config (`CatalogConfig`).
#[derive(Deserialize, Default)]
struct CatalogConfig {
    #[serde(default)]
    overrides: HashMap<String, String>,
    #[serde(default)]
    defaults: HashMap<String, String>,
}

/// An HTTP answer: status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    /// The server's error message (`{"error": {"message": …}}`), or the body's start.
    fn message(&self) -> String {
        #[derive(Deserialize)]
        struct Body {
            error: Inner,
        }
        #[derive(Deserialize)]
        struct Inner {
            message: Option<String>,
            r#type: Option<String>,
        }
        match serde_json::from_slice::<Body>(&self.body) {
            Ok(Body { error }) => format!(
                "{}: {}",
                error.r#type.unwrap_or_default(),
                error.message.unwrap_or_default()
            ),
            Err(_) => String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned(),
        }
    }

    fn error(&self, what: &str) -> Error {
        Error::new(
            ErrorKind::Unexpected,
            format!(
                "the REST catalog: {what}: HTTP {} {}",
                self.status,
                self.message()
            ),
        )
    }

    fn parse<T: serde::de::DeserializeOwned>(&self, what: &str) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("the REST catalog: {what}: the answer is not what the protocol says"),
            )
            .with_source(e)
        })
    }
}

/// One path segment, percent-encoded (names are the user's: every byte that is not
/// unreserved is escaped).
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A namespace in a path: its levels joined by the unit separator, encoded.
fn namespace_segment(namespace: &NamespaceIdent) -> String {
    segment(&namespace.join("\u{1f}"))
}

fn conflict(table: &TableIdent, answer: &Answer) -> Error {
    Error::new(
        ErrorKind::CatalogCommitConflicts,
        format!(
            "table {table} changed since it was read: the commit lost the race ({})",
            answer.message()
        ),
    )
    .with_retryable(false)
}

impl RestCatalog {
    /// The catalog at `uri` (`http(s)://host[:port][/path]`), tables' files reached through
    /// `file_io`, `token` sent as a bearer token.
    ///
    /// # Errors
    ///
    /// When the HTTP client cannot be made.
    pub fn new(
        uri: &str,
        warehouse: String,
        token: Option<String>,
        file_io: FileIO,
    ) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .tcp_keepalive(Duration::from_secs(30))
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                Error::new(ErrorKind::Unexpected, "cannot make the HTTP client").with_source(e)
            })?;
        Ok(Self {
            base: format!("{}/v1", uri.trim_end_matches('/')),
            warehouse,
            token,
            http,
            file_io,
            prefix: Mutex::new(None),
        })
    }

    async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer> {
        let mut request = self.http.request(method, url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = request.send().await.map_err(|e| {
            // reqwest's message names the URL only; no secret is in it.
            Error::new(
                ErrorKind::Unexpected,
                format!("the REST catalog at {} cannot be reached", self.base),
            )
            .with_retryable(true)
            .with_source(e)
        })?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("the REST catalog at {}: the answer was cut", self.base),
            )
            .with_source(e)
        })?;
        Ok(Answer {
            status,
            body: body.to_vec(),
        })
    }

    /// `<base>[/<prefix>]`: the server's config is read once (with the warehouse).
    async fn root(&self) -> Result<String> {
        if let Some(prefix) = self
            .prefix
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            return Ok(prefix.clone());
        }
        let url = format!(
            "{}/config?warehouse={}",
            self.base,
            segment(&self.warehouse)
        );
        let answer = self.request(reqwest::Method::GET, &url, None).await?;
        if answer.status != 200 {
            return Err(answer.error("cannot read the catalog's config"));
        }
        let config: CatalogConfig = answer.parse("the catalog's config")?;
        let prefix = config
            .overrides
            .get("prefix")
            .or_else(|| config.defaults.get("prefix"))
            .filter(|prefix| !prefix.is_empty());
        let root = match prefix {
            Some(prefix) => format!(
                "{}/{}",
                self.base,
                prefix.split('/').map(segment).collect::<Vec<_>>().join("/")
            ),
            None => self.base.clone(),
        };
        *self
            .prefix
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(root.clone());
        Ok(root)
    }

    async fn table_url(&self, ident: &TableIdent) -> Result<String> {
        Ok(format!(
            "{}/namespaces/{}/tables/{}",
            self.root().await?,
            namespace_segment(ident.namespace()),
            segment(ident.name())
        ))
    }

    fn table(&self, ident: TableIdent, loaded: LoadedTable) -> Result<Table> {
        let mut builder = Table::builder()
            .file_io(self.file_io.clone())
            .identifier(ident)
            .metadata(loaded.metadata)
            .runtime(Runtime::try_current()?);
        if let Some(location) = loaded.metadata_location {
            builder = builder.metadata_location(location);
        }
        builder.build()
    }

    /// Whether the namespace exists.
    ///
    /// # Errors
    ///
    /// The server's errors.
    pub async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let url = format!(
            "{}/namespaces/{}",
            self.root().await?,
            namespace_segment(namespace)
        );
        let answer = self.request(reqwest::Method::GET, &url, None).await?;
        match answer.status {
            200 | 204 => Ok(true),
            404 => Ok(false),
            _ => Err(answer.error("cannot read a namespace")),
        }
    }

    /// Creates the namespace (one that exists is fine: concurrent creators agree).
    ///
    /// # Errors
    ///
    /// The server's errors.
    pub async fn create_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        let url = format!("{}/namespaces", self.root().await?);
        let body = serde_json::json!({ "namespace": namespace.as_ref(), "properties": {} });
        let answer = self
            .request(
                reqwest::Method::POST,
                &url,
                Some(body.to_string().into_bytes()),
            )
            .await?;
        match answer.status {
            200 | 409 => Ok(()),
            _ => Err(answer.error("cannot create a namespace")),
        }
    }

    /// Creates the table (the server chooses its location under its warehouse and writes its
    /// first metadata).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::TableAlreadyExists`] when it exists; the server's errors.
    pub async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        let ident = TableIdent::new(namespace.clone(), creation.name.clone());
        let mut properties = creation.properties.clone();
        properties.insert(
            "format-version".into(),
            (creation.format_version as u8).to_string(),
        );
        let mut body = serde_json::json!({
            "name": creation.name,
            "schema": creation.schema,
            "properties": properties,
            "stage-create": false,
        });
        if let Some(location) = &creation.location {
            body["location"] = location.clone().into();
        }
        if let Some(spec) = &creation.partition_spec {
            body["partition-spec"] = serde_json::to_value(spec).map_err(|e| {
                Error::new(ErrorKind::DataInvalid, "cannot encode a partition spec").with_source(e)
            })?;
        }
        let url = format!(
            "{}/namespaces/{}/tables",
            self.root().await?,
            namespace_segment(namespace)
        );
        let answer = self
            .request(
                reqwest::Method::POST,
                &url,
                Some(body.to_string().into_bytes()),
            )
            .await?;
        match answer.status {
            200 => self.table(ident, answer.parse("a created table")?),
            409 => Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {ident} already exists"),
            )),
            _ => Err(answer.error(&format!("cannot create table {ident}"))),
        }
    }

    /// The table.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::TableNotFound`]; the server's errors.
    pub async fn load_table(&self, ident: &TableIdent) -> Result<Table> {
        let url = self.table_url(ident).await?;
        let answer = self.request(reqwest::Method::GET, &url, None).await?;
        match answer.status {
            200 => self.table(ident.clone(), answer.parse("a table")?),
            404 => Err(Error::new(
                ErrorKind::TableNotFound,
                format!(
                    "no table {ident} in the REST catalog ({})",
                    answer.message()
                ),
            )),
            _ => Err(answer.error(&format!("cannot read table {ident}"))),
        }
    }

    /// Commits `updates` to `ident` if `requirements` hold; a lost race is
    /// [`ErrorKind::CatalogCommitConflicts`], not retried.
    ///
    /// # Errors
    ///
    /// The conflict; the server's errors (a 5xx leaves it unknown whether the commit took
    /// place: the writer's next read of the table tells).
    pub async fn commit(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Table> {
        let url = self.table_url(ident).await?;
        let body = serde_json::json!({
            "identifier": { "namespace": ident.namespace().as_ref(), "name": ident.name() },
            "requirements": requirements,
            "updates": updates,
        });
        let answer = self
            .request(
                reqwest::Method::POST,
                &url,
                Some(body.to_string().into_bytes()),
            )
            .await?;
        match answer.status {
            200 => self.table(ident.clone(), answer.parse("a committed table")?),
            409 => Err(conflict(ident, &answer)),
            _ => Err(answer.error(&format!("cannot commit to table {ident}"))),
        }
    }

    /// Makes `metadata` (built on `base`'s) current if `base` is still what the catalog
    /// holds: the updates between them, pinned by requirements on `base`.
    ///
    /// # Errors
    ///
    /// As [`RestCatalog::commit`].
    pub async fn commit_metadata(&self, base: &Table, metadata: &TableMetadata) -> Result<Table> {
        let (requirements, updates) = updates_between(base.metadata(), metadata);
        self.commit(base.identifier(), requirements, updates).await
    }
}

/// The requirements that pin `base` and the updates that turn it into `next`: new schemas,
/// partition specs and snapshots, the current schema and spec, the `main` branch, changed
/// properties — what sluice's commits change.
pub fn updates_between(
    base: &TableMetadata,
    next: &TableMetadata,
) -> (Vec<TableRequirement>, Vec<TableUpdate>) {
    let mut requirements = vec![
        TableRequirement::UuidMatch { uuid: base.uuid() },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: "main".into(),
            snapshot_id: base.current_snapshot_id(),
        },
    ];
    let mut updates = Vec::new();
    for schema in next.schemas_iter() {
        if base.schema_by_id(schema.schema_id()).is_none() {
            updates.push(TableUpdate::AddSchema {
                schema: schema.as_ref().clone(),
            });
        }
    }
    if next.current_schema_id() != base.current_schema_id() {
        requirements.push(TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: base.current_schema_id(),
        });
        requirements.push(TableRequirement::LastAssignedFieldIdMatch {
            last_assigned_field_id: base.last_column_id(),
        });
        // -1: the schema added by this request (a server may number it its own way).
        let added = base.schema_by_id(next.current_schema_id()).is_none();
        updates.push(TableUpdate::SetCurrentSchema {
            schema_id: if added { -1 } else { next.current_schema_id() },
        });
    }
    for spec in next.partition_specs_iter() {
        if base.partition_spec_by_id(spec.spec_id()).is_none() {
            updates.push(TableUpdate::AddSpec {
                spec: spec.as_ref().clone().into_unbound(),
            });
        }
    }
    if next.default_partition_spec_id() != base.default_partition_spec_id() {
        requirements.push(TableRequirement::DefaultSpecIdMatch {
            default_spec_id: base.default_partition_spec_id(),
        });
        updates.push(TableUpdate::SetDefaultSpec {
            spec_id: next.default_partition_spec_id(),
        });
    }
    for snapshot in next.snapshots() {
        if base.snapshot_by_id(snapshot.snapshot_id()).is_none() {
            updates.push(TableUpdate::AddSnapshot {
                snapshot: snapshot.as_ref().clone(),
            });
        }
    }
    if let Some(id) = next.current_snapshot_id()
        && base.current_snapshot_id() != Some(id)
    {
        updates.push(TableUpdate::SetSnapshotRef {
            ref_name: "main".into(),
            reference: SnapshotReference::new(id, SnapshotRetention::branch(None, None, None)),
        });
    }
    let changed: HashMap<String, String> = next
        .properties()
        .iter()
        .filter(|(key, value)| base.properties().get(*key) != Some(*value))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    if !changed.is_empty() {
        updates.push(TableUpdate::SetProperties { updates: changed });
    }
    (requirements, updates)
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{
        NestedField, Operation, PrimitiveType, Schema, Snapshot, Summary, TableMetadataBuilder,
        Type,
    };

    use super::*;

    fn base() -> TableMetadata {
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
            ])
            .build()
            .unwrap();
        let creation = TableCreation::builder()
            .name("t".into())
            .location("s3://b/wh/t".into())
            .schema(schema)
            .build();
        TableMetadataBuilder::from_table_creation(creation)
            .unwrap()
            .build()
            .unwrap()
            .metadata
    }

    /// A new snapshot on `base` and the `main` branch moved to it: the update request adds
    /// the snapshot and moves the branch, pinned to `base`'s UUID and (absent) `main`.
    #[test]
    fn a_commit_adds_the_snapshot_and_moves_main_pinned_to_the_base() {
        let base = base();
        let snapshot = Snapshot::builder()
            .with_snapshot_id(42)
            .with_sequence_number(1)
            .with_timestamp_ms(base.last_updated_ms() + 1)
            .with_manifest_list("s3://b/wh/t/metadata/snap-42.avro")
            .with_schema_id(0)
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: HashMap::from([("k".into(), "v".into())]),
            })
            .build();
        let next = TableMetadataBuilder::new_from_metadata(base.clone(), None)
            .set_branch_snapshot(snapshot, "main")
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        let (requirements, updates) = updates_between(&base, &next);
        assert_eq!(
            requirements,
            [
                TableRequirement::UuidMatch { uuid: base.uuid() },
                TableRequirement::RefSnapshotIdMatch {
                    r#ref: "main".into(),
                    snapshot_id: None
                },
            ]
        );
        let json = serde_json::to_value(&updates).unwrap();
        let actions: Vec<&str> = json
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["action"].as_str().unwrap())
            .collect();
        assert_eq!(actions, ["add-snapshot", "set-snapshot-ref"], "{json}");
        assert_eq!(json[0]["snapshot"]["snapshot-id"], 42);
        assert_eq!(json[0]["snapshot"]["summary"]["k"], "v");
        assert_eq!(json[1]["ref-name"], "main");
        assert_eq!(json[1]["snapshot-id"], 42);
        assert_eq!(json[1]["type"], "branch");
        // Nothing changed: nothing to send but the pins.
        assert!(updates_between(&next, &next).1.is_empty());
    }

    #[test]
    fn names_in_paths_are_escaped() {
        assert_eq!(segment("orders"), "orders");
        assert_eq!(segment("a b/c?d%"), "a%20b%2Fc%3Fd%25");
        assert_eq!(
            namespace_segment(&NamespaceIdent::from_strs(["a", "b"]).unwrap()),
            "a%1Fb"
        );
    }
}
