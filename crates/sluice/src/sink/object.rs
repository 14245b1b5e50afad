//! S3-compatible object storage as the files sink's target: the client and the few calls the
//! commit protocol makes (see [`crate::sink::files`] for the protocol itself).
//!
//! The store is reached through the `object_store` crate (`aws` feature: S3 and S3-compatible
//! servers such as MinIO or moto). Workers are plain threads, so every call blocks on the
//! runtime handle given at construction; none is made from inside the runtime.

use std::io;
use std::path::Path;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::Deserialize;
use tokio::io::AsyncWriteExt as _;

/// The smallest multipart part S3 accepts (every part but the last).
pub const MIN_UPLOAD_PART_BYTES: usize = 5 * 1024 * 1024;

/// The largest `sink.files.roll_bytes` with an object store: a committed object is copied
/// from its staged key with one `CopyObject`, which takes up to 5 GiB; a file may exceed
/// `roll_bytes` by its last record.
pub const MAX_ROLL_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// Default part size of multipart uploads to an object store (S3's minimum is 5 MiB).
pub const DEFAULT_UPLOAD_PART_BYTES: usize = 16 * 1024 * 1024;

/// `[sink.files.s3]`. Unset keys come from the environment as the AWS tools read it
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
/// `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// An S3-compatible server's URL, e.g. `http://127.0.0.1:9000`; default: AWS.
    pub endpoint: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key (use `"${AWS_SECRET_ACCESS_KEY}"` or leave it to the environment).
    pub secret_access_key: Option<String>,
    /// Allow a plain-HTTP endpoint (a local test server).
    pub allow_http: Option<bool>,
    /// Files larger than this are uploaded in parts of this size (at least 5 MiB).
    #[serde(default = "default_upload_part_bytes")]
    pub upload_part_bytes: usize,
}

impl Default for S3Config {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            allow_http: None,
            upload_part_bytes: DEFAULT_UPLOAD_PART_BYTES,
        }
    }
}

/// The secret stays out of logs and error messages.
impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("allow_http", &self.allow_http)
            .field("upload_part_bytes", &self.upload_part_bytes)
            .finish()
    }
}

const fn default_upload_part_bytes() -> usize {
    DEFAULT_UPLOAD_PART_BYTES
}

/// An object store under a prefix; see the [module docs](self).
pub struct ObjectTarget {
    store: Arc<dyn ObjectStore>,
    url: String,
    runtime: tokio::runtime::Handle,
    part_bytes: usize,
}

impl std::fmt::Debug for ObjectTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectTarget")
            .field("url", &self.url)
            .field("part_bytes", &self.part_bytes)
            .finish_non_exhaustive()
    }
}

/// `s3://bucket/prefix` split into its bucket and prefix (without slashes at either end).
///
/// # Errors
///
/// A description of what is wrong with `url`.
pub fn parse_s3_url(url: &str) -> Result<(&str, &str), String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{url:?} is not an S3 URL: expected s3://bucket/prefix"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!(
            "{url:?} names no bucket: expected s3://bucket/prefix"
        ));
    }
    Ok((bucket, prefix.trim_matches('/')))
}

/// An S3 client for `bucket`: settings from the environment (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT`,
/// `AWS_ALLOW_HTTP`, …), overridden by `config`.
///
/// # Errors
///
/// An invalid setting (nothing is contacted yet).
pub fn s3_client(
    bucket: &str,
    config: &S3Config,
) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
    crate::crypto::install();
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(endpoint) = &config.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &config.region {
        builder = builder.with_region(region);
    }
    if let Some(key) = &config.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &config.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    if let Some(allow_http) = config.allow_http {
        builder = builder.with_allow_http(allow_http);
    }
    Ok(Arc::new(builder.build()?))
}

impl ObjectTarget {
    /// An S3 client for `url` (`s3://bucket/prefix`): settings from the environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
    /// `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, …), overridden by `[sink.files.s3]`.
    ///
    /// # Errors
    ///
    /// An invalid URL or setting (nothing is contacted yet).
    pub fn s3(
        url: &str,
        config: &S3Config,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, object_store::Error> {
        let (bucket, prefix) =
            parse_s3_url(url).map_err(|problem| object_store::Error::Generic {
                store: "S3",
                source: problem.into(),
            })?;
        let s3 = s3_client(bucket, config)?;
        let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
            s3
        } else {
            Arc::new(PrefixStore::new(s3, prefix))
        };
        Ok(Self::new(store, url, runtime, config.upload_part_bytes))
    }

    /// A target over any store (tests use `object_store::memory::InMemory`).
    pub fn new(
        store: Arc<dyn ObjectStore>,
        url: &str,
        runtime: tokio::runtime::Handle,
        part_bytes: usize,
    ) -> Self {
        Self {
            store,
            url: url.trim_end_matches('/').to_owned(),
            runtime,
            part_bytes: part_bytes.max(MIN_UPLOAD_PART_BYTES),
        }
    }

    /// The target's URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The object's bytes, or `None` when there is no such object.
    ///
    /// # Errors
    ///
    /// The store's errors other than "not found".
    pub fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let location = ObjectPath::from(key);
        self.runtime.block_on(async {
            match self.store.get(&location).await {
                Ok(result) => Ok(Some(result.bytes().await.map_err(io_error)?.to_vec())),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(error) => Err(io_error(error)),
            }
        })
    }

    /// Writes an object with one PUT: readers see the old object or the new one, whole.
    ///
    /// # Errors
    ///
    /// The store's errors (after `object_store`'s own retries).
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> io::Result<()> {
        let location = ObjectPath::from(key);
        self.runtime
            .block_on(self.store.put(&location, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(io_error)
    }

    /// The object's bytes and e-tag, or `None` when there is no such object.
    ///
    /// # Errors
    ///
    /// The store's errors other than "not found".
    pub fn get_tagged(&self, key: &str) -> io::Result<Option<(Vec<u8>, Option<String>)>> {
        let location = ObjectPath::from(key);
        self.runtime.block_on(async {
            match self.store.get(&location).await {
                Ok(result) => {
                    let e_tag = result.meta.e_tag.clone();
                    let bytes = result.bytes().await.map_err(io_error)?.to_vec();
                    Ok(Some((bytes, e_tag)))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(error) => Err(io_error(error)),
            }
        })
    }

    /// Writes an object with one conditional PUT: only when its current e-tag is `expected`
    /// (`If-Match`), or, with `None`, only when there is no such object (`If-None-Match: *`).
    /// Returns the new e-tag, or [`PutOutcome::Conflict`] when the condition does not hold.
    ///
    /// # Errors
    ///
    /// The store's other errors (after `object_store`'s own retries).
    pub fn put_if(
        &self,
        key: &str,
        bytes: Vec<u8>,
        expected: Option<&str>,
    ) -> io::Result<PutOutcome> {
        let location = ObjectPath::from(key);
        let mode = match expected {
            Some(e_tag) => PutMode::Update(UpdateVersion {
                e_tag: Some(e_tag.to_owned()),
                version: None,
            }),
            None => PutMode::Create,
        };
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let put = self
            .store
            .put_opts(&location, PutPayload::from(bytes), options);
        match self.runtime.block_on(put) {
            Ok(result) => Ok(PutOutcome::Written(result.e_tag)),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => Ok(PutOutcome::Conflict),
            Err(error) => Err(io_error(error)),
        }
    }

    /// Copies an object inside the store (S3 `CopyObject`: up to 5 GiB); `Ok(false)` when
    /// `from` does not exist.
    ///
    /// # Errors
    ///
    /// The store's errors other than "not found".
    pub fn copy(&self, from: &str, to: &str) -> io::Result<bool> {
        let (from, to) = (ObjectPath::from(from), ObjectPath::from(to));
        match self.runtime.block_on(self.store.copy(&from, &to)) {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(error) => Err(io_error(error)),
        }
    }

    /// Whether an object exists.
    ///
    /// # Errors
    ///
    /// The store's errors other than "not found".
    pub fn exists(&self, key: &str) -> io::Result<bool> {
        let location = ObjectPath::from(key);
        match self.runtime.block_on(self.store.head(&location)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(error) => Err(io_error(error)),
        }
    }

    /// Deletes an object; one that does not exist is not an error.
    ///
    /// # Errors
    ///
    /// The store's errors other than "not found".
    pub fn delete(&self, key: &str) -> io::Result<()> {
        let location = ObjectPath::from(key);
        match self.runtime.block_on(self.store.delete(&location)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(io_error(error)),
        }
    }

    /// Uploads a local file to `key`: one PUT when it is smaller than a part, otherwise a
    /// multipart upload (parts of `upload_part_bytes`, several in flight), aborted on failure.
    ///
    /// # Errors
    ///
    /// Reading the file or the store's errors.
    pub fn upload(&self, local: &Path, key: &str) -> io::Result<()> {
        let location = ObjectPath::from(key);
        self.runtime.block_on(async {
            let mut file = tokio::fs::File::open(local).await?;
            let mut writer =
                BufWriter::with_capacity(Arc::clone(&self.store), location, self.part_bytes)
                    .with_max_concurrency(4);
            let copied = async {
                tokio::io::copy(&mut file, &mut writer).await?;
                writer.shutdown().await
            }
            .await;
            if let Err(error) = copied {
                // Drops the parts a multipart upload already stored.
                let _ = writer.abort().await;
                return Err(error);
            }
            Ok(())
        })
    }

    /// The keys under `prefix` (relative to the target), for tests and tools.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        use futures::TryStreamExt as _;
        let location = ObjectPath::from(prefix);
        self.runtime.block_on(async {
            let metas: Vec<object_store::ObjectMeta> = self
                .store
                .list(Some(&location))
                .try_collect()
                .await
                .map_err(io_error)?;
            Ok(metas.into_iter().map(|m| m.location.to_string()).collect())
        })
    }
}

/// What a conditional PUT ([`ObjectTarget::put_if`]) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// Written; the new object's e-tag.
    Written(Option<String>),
    /// Not written: the object changed (or exists, or is gone) since the expected version.
    Conflict,
}

fn io_error(error: object_store::Error) -> io::Error {
    let kind = match &error {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_urls_split_into_bucket_and_prefix() {
        assert_eq!(parse_s3_url("s3://b/a/b/"), Ok(("b", "a/b")));
        assert_eq!(parse_s3_url("s3://b"), Ok(("b", "")));
        assert!(parse_s3_url("s3:///x").is_err());
        assert!(parse_s3_url("/tmp/x").is_err());
    }

    #[test]
    fn large_uploads_are_multipart_and_small_ones_single_puts() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store = Arc::new(object_store::memory::InMemory::new());
        let target = ObjectTarget::new(
            Arc::clone(&store) as Arc<dyn ObjectStore>,
            "mem://x",
            runtime.handle().clone(),
            0,
        );
        let dir = std::env::temp_dir().join(format!("sluice-object-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big: Vec<u8> = (0..MIN_UPLOAD_PART_BYTES * 2 + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(dir.join("big"), &big).unwrap();
        std::fs::write(dir.join("small"), b"hello").unwrap();
        target.upload(&dir.join("big"), "a/big").unwrap();
        target.upload(&dir.join("small"), "a/small").unwrap();
        assert_eq!(target.get("a/big").unwrap().unwrap(), big);
        assert_eq!(target.get("a/small").unwrap().unwrap(), b"hello");
        assert_eq!(target.get("a/none").unwrap(), None);
        target.delete("a/small").unwrap();
        target.delete("a/small").unwrap();
        assert_eq!(target.list("a").unwrap(), ["a/big"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
