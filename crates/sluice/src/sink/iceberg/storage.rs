//! The warehouse's storage for the `iceberg` crate's file IO: `s3://` through the
//! `object_store` crate's S3 client (the files sink's, with `[sink.iceberg.s3]` settings as
//! `[sink.files.s3]`), `file://` through the crate's local file system storage.
//!
//! Written here because the `iceberg` crate (0.10) ships only local and in-memory storages
//! (its S3 storage moved to a separate crate over OpenDAL, a second S3 client beside the
//! `object_store` one sluice already builds); its `Storage` trait is the documented way to
//! bring one's own.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use iceberg::io::{
    FileIO, FileIOBuilder, FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage,
    OutputFile, Storage, StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt as _};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt as _;

use crate::sink::object::{S3Config, parse_s3_url};

/// Parts of a multipart upload (a data file larger than this is uploaded in parts).
const PART_BYTES: usize = 16 * 1024 * 1024;

/// `s3://<bucket>/…` through one S3 client, `file:` paths on the local file system.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WarehouseStorage {
    /// The bucket the client reaches; `None` for a local warehouse.
    bucket: Option<String>,
    /// The client. Not serialized: a storage sent to another process cannot be rebuilt
    /// without its credentials, and its calls fail.
    #[serde(skip)]
    store: Option<Arc<dyn ObjectStore>>,
}

fn io_error(what: String, error: object_store::Error) -> Error {
    Error::new(ErrorKind::Unexpected, what).with_source(error)
}

impl WarehouseStorage {
    /// The object's key in the bucket of `path` (`s3://bucket/key`); `None` for a local path.
    fn key(&self, path: &str) -> Result<Option<(Arc<dyn ObjectStore>, ObjectPath)>> {
        if !path.starts_with("s3://") && !path.starts_with("s3a://") {
            return Ok(None);
        }
        let path = path.replacen("s3a://", "s3://", 1);
        let (bucket, key) =
            parse_s3_url(&path).map_err(|problem| Error::new(ErrorKind::DataInvalid, problem))?;
        match (&self.bucket, &self.store) {
            (Some(ours), Some(store)) if ours == bucket => {
                // The key as it is: `ObjectPath::from` would percent-encode characters such as
                // `~` (upsert's directories), so readers would not find the objects.
                let key = ObjectPath::parse(key).map_err(|e| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!("{path} is not an object key sluice can write"),
                    )
                    .with_source(e)
                })?;
                Ok(Some((Arc::clone(store), key)))
            }
            (Some(ours), Some(_)) => Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "{path} is in bucket {bucket:?}, not in the warehouse's bucket {ours:?}: expected the table's files under sink.iceberg.warehouse"
                ),
            )),
            _ => Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "{path} is on S3 but sink.iceberg.warehouse is not: expected warehouse = \"s3://bucket/prefix\""
                ),
            )),
        }
    }
}

/// The file IO of a warehouse at `warehouse` (`file:///path` or `s3://bucket/prefix`).
///
/// # Errors
///
/// An S3 setting the client refuses (nothing is contacted yet).
pub fn warehouse_file_io(warehouse: &str, s3: &S3Config) -> Result<FileIO> {
    let storage = if warehouse.starts_with("s3://") {
        let (bucket, _) = parse_s3_url(warehouse)
            .map_err(|problem| Error::new(ErrorKind::DataInvalid, problem))?;
        let store = crate::sink::object::s3_client(bucket, s3)
            .map_err(|e| io_error("cannot make the S3 client".into(), e))?;
        WarehouseStorage {
            bucket: Some(bucket.to_owned()),
            store: Some(store),
        }
    } else {
        WarehouseStorage {
            bucket: None,
            store: None,
        }
    };
    Ok(FileIOBuilder::new(Arc::new(WarehouseStorageFactory { storage })).build())
}

/// Hands out its one [`WarehouseStorage`].
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WarehouseStorageFactory {
    storage: WarehouseStorage,
}

#[typetag::serde]
impl StorageFactory for WarehouseStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.storage.clone()))
    }
}

#[async_trait]
#[typetag::serde]
impl Storage for WarehouseStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.key(path)? {
            None => LocalFsStorage::new().exists(path).await,
            Some((store, key)) => match store.head(&key).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(io_error(format!("cannot look up {path}"), e)),
            },
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        match self.key(path)? {
            None => LocalFsStorage::new().metadata(path).await,
            Some((store, key)) => {
                let meta = store
                    .head(&key)
                    .await
                    .map_err(|e| io_error(format!("cannot look up {path}"), e))?;
                Ok(FileMetadata { size: meta.size })
            }
        }
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        match self.key(path)? {
            None => LocalFsStorage::new().read(path).await,
            Some((store, key)) => {
                let result = store
                    .get(&key)
                    .await
                    .map_err(|e| io_error(format!("cannot read {path}"), e))?;
                result
                    .bytes()
                    .await
                    .map_err(|e| io_error(format!("cannot read {path}"), e))
            }
        }
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        match self.key(path)? {
            None => LocalFsStorage::new().reader(path).await,
            Some((store, key)) => Ok(Box::new(ObjectRead {
                store,
                key,
                path: path.to_owned(),
            })),
        }
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        match self.key(path)? {
            None => LocalFsStorage::new().write(path, bs).await,
            Some((store, key)) => store
                .put(&key, bs.into())
                .await
                .map(|_| ())
                .map_err(|e| io_error(format!("cannot write {path}"), e)),
        }
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        match self.key(path)? {
            None => LocalFsStorage::new().writer(path).await,
            Some((store, key)) => Ok(Box::new(ObjectWrite {
                writer: Some(BufWriter::with_capacity(store, key, PART_BYTES)),
                path: path.to_owned(),
            })),
        }
    }

    async fn delete(&self, path: &str) -> Result<()> {
        match self.key(path)? {
            None => LocalFsStorage::new().delete(path).await,
            Some((store, key)) => match store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(io_error(format!("cannot delete {path}"), e)),
            },
        }
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        match self.key(path)? {
            None => LocalFsStorage::new().delete_prefix(path).await,
            Some(_) => Err(Error::new(
                ErrorKind::FeatureUnsupported,
                "sluice never deletes a prefix of an S3 warehouse",
            )),
        }
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_owned()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_owned()))
    }
}

/// Ranged reads of one object.
#[derive(Debug)]
struct ObjectRead {
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    path: String,
}

#[async_trait]
impl FileRead for ObjectRead {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.store
            .get_range(&self.key, range)
            .await
            .map_err(|e| io_error(format!("cannot read {}", self.path), e))
    }
}

/// One object written in parts (a single PUT when it is small).
struct ObjectWrite {
    writer: Option<BufWriter>,
    path: String,
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        let writer = self
            .writer
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, format!("{} is closed", self.path)))?;
        writer.put(bs).await.map_err(|e| {
            Error::new(ErrorKind::Unexpected, format!("cannot write {}", self.path)).with_source(e)
        })
    }

    async fn close(&mut self) -> Result<()> {
        let mut writer = self
            .writer
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, format!("{} is closed", self.path)))?;
        writer.shutdown().await.map_err(|e| {
            Error::new(ErrorKind::Unexpected, format!("cannot write {}", self.path)).with_source(e)
        })
    }
}
