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
//!
//! Authentication: a bearer token as given, or OAuth2 client credentials exchanged for one
//! at the token endpoint (the `client_credentials` grant, as pyiceberg's and Java's
//! `credential`: [`RestAuth::Credential`]), fetched again before it expires and after a 401.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// How a REST catalog's requests are authenticated.
#[derive(Clone, Default)]
pub enum RestAuth {
    /// None.
    #[default]
    None,
    /// A bearer token, sent as it is.
    Token(String),
    /// OAuth2 client credentials: exchanged for a bearer token at `server` (the
    /// `client_credentials` grant, form-encoded, with `scope`).
    Credential {
        /// The client id (`None`: the credential is the secret alone).
        client_id: Option<String>,
        /// The client secret.
        secret: String,
        /// The token endpoint.
        server: String,
        /// The scope asked for.
        scope: String,
    },
}

impl RestAuth {
    /// The credentials of `credential` (`client_id:client_secret`, or the secret alone, as
    /// pyiceberg and Java read it) for the token endpoint `server` and `scope`.
    pub fn credential(credential: &str, server: String, scope: String) -> Self {
        let (client_id, secret) = match credential.split_once(':') {
            Some((id, secret)) => (Some(id.to_owned()), secret.to_owned()),
            None => (None, credential.to_owned()),
        };
        Self::Credential {
            client_id,
            secret,
            server,
            scope,
        }
    }
}

/// A token from the OAuth2 server, and when to fetch another.
struct Token {
    value: String,
    renew_at: Option<Instant>,
}

/// The token endpoint's answer (RFC 6749 section 5.1).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// When to fetch another token than one received at `now` for `expires_in` seconds: a tenth
/// of its life (at most a minute) before it expires; `None` (never) for a lifetime past what
/// an instant holds (the number is the server's: no overflow panics).
fn renew_at(now: Instant, expires_in: u64) -> Option<Instant> {
    now.checked_add(Duration::from_secs(expires_in - (expires_in / 10).min(60)))
}

/// A REST catalog.
pub struct RestCatalog {
    /// `<catalog_uri>/v1`.
    base: String,
    warehouse: String,
    auth: RestAuth,
    /// [`RestAuth::Credential`]'s current token.
    token: Mutex<Option<Token>>,
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
    /// `file_io`, requests authenticated by `auth`.
    ///
    /// # Errors
    ///
    /// When the HTTP client cannot be made.
    pub fn new(uri: &str, warehouse: String, auth: RestAuth, file_io: FileIO) -> Result<Self> {
        crate::crypto::install();
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
            auth,
            token: Mutex::new(None),
            http,
            file_io,
            prefix: Mutex::new(None),
        })
    }

    /// The default token endpoint of the catalog at `uri`: `<uri>/v1/oauth/tokens` (where
    /// pyiceberg and Java ask when no `oauth2-server-uri` is set).
    pub fn default_token_endpoint(uri: &str) -> String {
        format!("{}/v1/oauth/tokens", uri.trim_end_matches('/'))
    }

    /// The bearer token to send (`None`: no authentication): the given token, or the OAuth2
    /// server's current one (fetched when there is none or it is about to expire).
    async fn bearer(&self) -> Result<Option<String>> {
        let RestAuth::Credential {
            client_id,
            secret,
            server,
            scope,
        } = &self.auth
        else {
            return Ok(match &self.auth {
                RestAuth::Token(token) => Some(token.clone()),
                _ => None,
            });
        };
        if let Some(token) = self
            .token
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|t| t.renew_at.is_none_or(|at| Instant::now() < at))
        {
            return Ok(Some(token.value.clone()));
        }
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(id) = client_id {
            form.push(("client_id", id));
        }
        form.push(("client_secret", secret));
        form.push(("scope", scope));
        // application/x-www-form-urlencoded, every byte but the unreserved ones escaped.
        let form = form
            .iter()
            .map(|(name, value)| format!("{}={}", segment(name), segment(value)))
            .collect::<Vec<_>>()
            .join("&");
        let refused = |what: String| {
            Error::new(
                ErrorKind::Unexpected,
                format!("the REST catalog's OAuth2 server at {server}: {what}"),
            )
        };
        let response = self
            .http
            .post(server)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form)
            .send()
            .await
            .map_err(|e| {
                refused("cannot be reached".into())
                    .with_retryable(true)
                    .with_source(e)
            })?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|e| refused("the answer was cut".into()).with_source(e))?;
        if status != 200 {
            // RFC 6749's error answer ({"error", "error_description"}); the secret is never
            // in the message.
            #[derive(Deserialize)]
            struct Refusal {
                error: String,
                #[serde(default)]
                error_description: Option<String>,
            }
            let why = serde_json::from_slice::<Refusal>(&body).map_or_else(
                |_| String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
                |r| format!("{}: {}", r.error, r.error_description.unwrap_or_default()),
            );
            return Err(refused(format!(
                "the client credentials were refused: HTTP {status} {why} (check sink.iceberg.catalog_credential)"
            )));
        }
        let answer: TokenAnswer = serde_json::from_slice(&body).map_err(|e| {
            refused("the answer has no access_token (not an OAuth2 token answer)".into())
                .with_source(e)
        })?;
        let renew_at = answer
            .expires_in
            .and_then(|secs| renew_at(Instant::now(), secs));
        *self
            .token
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Token {
            value: answer.access_token.clone(),
            renew_at,
        });
        Ok(Some(answer.access_token))
    }

    /// Sends a request (again with a new token after a 401, when the token came from the
    /// OAuth2 server: it may have been revoked or expired early).
    async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer> {
        let renews = matches!(self.auth, RestAuth::Credential { .. });
        let bearer = self.bearer().await?;
        let again = if renews { body.clone() } else { None };
        let answer = self
            .send(method.clone(), url, body, bearer.as_deref())
            .await?;
        if answer.status == 401 && renews {
            let body = again;
            self.token
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            let bearer = self.bearer().await?;
            return self.send(method, url, body, bearer.as_deref()).await;
        }
        Ok(answer)
    }

    async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<Vec<u8>>,
        bearer: Option<&str>,
    ) -> Result<Answer> {
        let mut request = self.http.request(method, url);
        if let Some(token) = bearer {
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

    #[test]
    fn tokens_are_renewed_before_they_expire() {
        let now = Instant::now();
        assert_eq!(renew_at(now, 100), Some(now + Duration::from_secs(90)));
        assert_eq!(renew_at(now, 3600), Some(now + Duration::from_secs(3540)));
        assert_eq!(renew_at(now, 0), Some(now));
        assert_eq!(renew_at(now, u64::MAX), None);
    }

    /// OAuth2 client credentials against a catalog that wants a bearer token (a token
    /// endpoint and the routes the sink calls first, on 127.0.0.1): the credentials go
    /// form-encoded with the `client_credentials` grant, the token is fetched once and sent
    /// as `Bearer`, fetched again after a 401 (the server rotated it); refused credentials
    /// name the key and never the secret.
    #[tokio::test]
    async fn client_credentials_become_a_bearer_token_renewed_after_a_401() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU32, Ordering};

        use axum::http::{HeaderMap, StatusCode};

        #[derive(Default)]
        struct Server {
            issued: AtomicU32,
            current: Mutex<Option<String>>,
        }
        let server = Arc::new(Server::default());
        let authorized = |server: &Server, headers: &HeaderMap| {
            let current = server.current.lock().unwrap().clone();
            current.is_some_and(|token| {
                headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v == format!("Bearer {token}"))
            })
        };
        let tokens = {
            let server = Arc::clone(&server);
            move |body: String| {
                let server = Arc::clone(&server);
                async move {
                    if body
                        != "grant_type=client_credentials&client_id=sluice&client_secret=s%3Acr%20t&scope=catalog"
                    {
                        return (
                            StatusCode::UNAUTHORIZED,
                            r#"{"error":"invalid_client","error_description":"unknown client"}"#
                                .to_owned(),
                        );
                    }
                    let n = server.issued.fetch_add(1, Ordering::SeqCst) + 1;
                    let token = format!("token-{n}");
                    *server.current.lock().unwrap() = Some(token.clone());
                    (
                        StatusCode::OK,
                        serde_json::json!({"access_token": token, "token_type": "bearer", "expires_in": 3600})
                            .to_string(),
                    )
                }
            }
        };
        let config = {
            let server = Arc::clone(&server);
            move |headers: HeaderMap| {
                let ok = authorized(&server, &headers);
                async move {
                    if ok {
                        (StatusCode::OK, r#"{"overrides":{},"defaults":{}}"#)
                    } else {
                        (
                            StatusCode::UNAUTHORIZED,
                            r#"{"error":{"message":"no","type":"NotAuthorizedException","code":401}}"#,
                        )
                    }
                }
            }
        };
        let namespace = {
            let server = Arc::clone(&server);
            move |headers: HeaderMap| {
                let ok = authorized(&server, &headers);
                async move {
                    if ok {
                        (StatusCode::OK, r#"{"namespace":["cdc"],"properties":{}}"#)
                    } else {
                        (
                            StatusCode::UNAUTHORIZED,
                            r#"{"error":{"message":"no","type":"NotAuthorizedException","code":401}}"#,
                        )
                    }
                }
            }
        };
        let app = axum::Router::new()
            .route("/v1/oauth/tokens", axum::routing::post(tokens))
            .route("/v1/config", axum::routing::get(config))
            .route("/v1/namespaces/{ns}", axum::routing::get(namespace));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let serving = tokio::spawn(async move { axum::serve(listener, app).await });
        let file_io =
            super::super::storage::warehouse_file_io("file:///tmp", &Default::default()).unwrap();
        let catalog = |auth: RestAuth| {
            RestCatalog::new(&uri, "file:///tmp".into(), auth, file_io.clone()).unwrap()
        };
        let cdc = NamespaceIdent::new("cdc".into());
        let credential = |secret: &str| {
            RestAuth::credential(
                &format!("sluice:{secret}"),
                RestCatalog::default_token_endpoint(&uri),
                "catalog".into(),
            )
        };

        let with = catalog(credential("s:cr t"));
        assert!(with.namespace_exists(&cdc).await.unwrap());
        assert!(with.namespace_exists(&cdc).await.unwrap());
        assert_eq!(server.issued.load(Ordering::SeqCst), 1, "one token, reused");
        // The server rotates its token: the next call meets a 401 and fetches a new one.
        *server.current.lock().unwrap() = Some("rotated".into());
        let fresh = catalog(credential("s:cr t"));
        assert!(fresh.namespace_exists(&cdc).await.unwrap());
        assert!(with.namespace_exists(&cdc).await.unwrap());
        assert_eq!(server.issued.load(Ordering::SeqCst), 3);

        let refused = catalog(credential("wrong-secret"))
            .namespace_exists(&cdc)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("invalid_client") && refused.contains("catalog_credential"),
            "{refused}"
        );
        assert!(!refused.contains("wrong-secret"), "{refused}");
        let anonymous = catalog(RestAuth::None)
            .namespace_exists(&cdc)
            .await
            .unwrap_err()
            .to_string();
        assert!(anonymous.contains("HTTP 401"), "{anonymous}");
        serving.abort();
    }
}
