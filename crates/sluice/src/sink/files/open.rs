//! An epoch's open files: JSON Lines (plain, gzip, zstd) or Parquet, written under staged names.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::sink::config::{FileCompression, FileFormat};
use crate::sink::parquet::{ParquetFile, ParquetRow};
use crate::sink::typed::file::{TypedParquetFile, TypedRow};

/// How output files are written.
#[derive(Debug, Clone)]
pub struct FileSettings {
    /// Format.
    pub format: FileFormat,
    /// Compression.
    pub compression: FileCompression,
    /// JSON Lines: add the metadata fields.
    pub metadata: bool,
    /// Parquet: rows per row group.
    pub parquet_row_group_records: usize,
    /// Parquet: encoded bytes per row group.
    pub parquet_row_group_bytes: usize,
}

impl FileSettings {
    /// The final name's extension.
    pub fn extension(&self) -> &'static str {
        match (self.format, self.compression) {
            (FileFormat::Parquet, _) => "parquet",
            (FileFormat::Jsonl, FileCompression::Gzip) => "jsonl.gz",
            (FileFormat::Jsonl, FileCompression::Zstd) => "jsonl.zst",
            (FileFormat::Jsonl, _) => "jsonl",
        }
    }
}

/// One record as a file takes it.
#[derive(Debug)]
pub struct OutputRecord<'a> {
    /// Its fields for Parquet and the value for both formats.
    pub row: ParquetRow<'a>,
    /// The topic as a JSON string (quoted, escaped).
    pub topic_json: &'a str,
    /// Its typed row (`parquet_columns = "typed"`).
    pub typed: Option<TypedRow<'a>>,
}

enum Body {
    Plain(BufWriter<File>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
    Parquet(Box<ParquetFile>),
    Typed(Box<TypedParquetFile>),
}

/// An open output file of an epoch.
pub struct OpenFile {
    body: Option<Body>,
    pub(super) staged_name: String,
    pub(super) dir: String,
    pub(super) first_offset: i64,
    pub(super) last_offset: i64,
    pub(super) records: u64,
    pub(super) bytes: u64,
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("staged_name", &self.staged_name)
            .field("dir", &self.dir)
            .field("first_offset", &self.first_offset)
            .field("last_offset", &self.last_offset)
            .finish_non_exhaustive()
    }
}

/// A failure while writing a file: the record's fault, or I/O.
#[derive(Debug)]
pub enum WriteError {
    /// The record cannot be written (the failure policy decides).
    Record(String),
    /// The file system failed (the run is restarted from the committed files).
    Io(io::Error),
}

impl From<io::Error> for WriteError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

/// A record appended to a file after its [`OpenFile::finish`]: a sluice bug, carried inside
/// the `io::Error` the write path returns, so the run restarts from the committed files.
#[derive(Debug, thiserror::Error)]
#[error("a record was appended to a finished file (a sluice bug: please report it)")]
struct AlreadyFinished;

fn parquet_io(error: parquet::errors::ParquetError) -> io::Error {
    io::Error::other(error)
}

impl OpenFile {
    pub(super) fn create(
        path: &Path,
        staged_name: String,
        dir: String,
        settings: &FileSettings,
        first: &OutputRecord<'_>,
    ) -> io::Result<Self> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        let body = match (settings.format, settings.compression) {
            (FileFormat::Parquet, compression) if let Some(typed) = &first.typed => {
                Body::Typed(Box::new(
                    TypedParquetFile::create(
                        file,
                        typed.layout,
                        compression,
                        settings.parquet_row_group_records,
                        settings.parquet_row_group_bytes,
                    )
                    .map_err(parquet_io)?,
                ))
            }
            (FileFormat::Parquet, compression) => Body::Parquet(Box::new(
                ParquetFile::create(
                    file,
                    &first.row,
                    compression,
                    settings.parquet_row_group_records,
                    settings.parquet_row_group_bytes,
                )
                .map_err(parquet_io)?,
            )),
            (FileFormat::Jsonl, FileCompression::Gzip) => {
                Body::Gzip(flate2::write::GzEncoder::new(
                    BufWriter::with_capacity(1 << 18, file),
                    flate2::Compression::fast(),
                ))
            }
            (FileFormat::Jsonl, FileCompression::Zstd) => Body::Zstd(
                zstd::stream::write::Encoder::new(BufWriter::with_capacity(1 << 18, file), 3)?,
            ),
            (FileFormat::Jsonl, _) => Body::Plain(BufWriter::with_capacity(1 << 18, file)),
        };
        Ok(Self {
            body: Some(body),
            staged_name,
            dir,
            first_offset: first.row.offset,
            last_offset: first.row.offset,
            records: 0,
            bytes: 0,
        })
    }

    pub(super) fn append(
        &mut self,
        record: &OutputRecord<'_>,
        settings: &FileSettings,
    ) -> io::Result<()> {
        let row = &record.row;
        match self.body.as_mut() {
            Some(Body::Parquet(file)) => {
                file.append(row).map_err(parquet_io)?;
                self.bytes = file.size();
            }
            Some(Body::Typed(file)) => {
                let typed = record.typed.as_ref().ok_or_else(|| {
                    io::Error::other(
                        "a record without its typed row in a typed file (a sluice bug)",
                    )
                })?;
                file.append(typed, row.value.len() + row.key.map_or(0, <[u8]>::len))
                    .map_err(parquet_io)?;
                self.bytes = file.size();
            }
            Some(Body::Plain(out)) => self.bytes += write_line(out, record, settings)?,
            Some(Body::Gzip(out)) => self.bytes += write_line(out, record, settings)?,
            Some(Body::Zstd(out)) => self.bytes += write_line(out, record, settings)?,
            None => return Err(io::Error::other(AlreadyFinished)),
        }
        self.records += 1;
        self.last_offset = row.offset;
        Ok(())
    }

    /// Whether records can still be appended (not finished or closed).
    pub(super) fn is_open(&self) -> bool {
        self.body.is_some()
    }

    /// Whether `record` fits this file: a typed file takes rows of its columns only.
    pub(super) fn accepts(&self, record: &OutputRecord<'_>) -> bool {
        match (&self.body, &record.typed) {
            (Some(Body::Typed(file)), Some(typed)) => file.accepts(typed.layout),
            (Some(Body::Typed(_)), None) | (Some(_), Some(_)) => false,
            _ => true,
        }
    }

    /// Closes the file without finishing it (its staged name stays on disk).
    pub(super) fn close(&mut self) {
        self.body = None;
    }

    /// Finishes and syncs the file.
    pub(super) fn finish(&mut self) -> io::Result<()> {
        let file = match self.body.take() {
            Some(Body::Plain(out)) => out.into_inner().map_err(|e| e.into_error())?,
            Some(Body::Gzip(out)) => out.finish()?.into_inner().map_err(|e| e.into_error())?,
            Some(Body::Zstd(out)) => out.finish()?.into_inner().map_err(|e| e.into_error())?,
            Some(Body::Parquet(file)) => file.finish().map_err(parquet_io)?,
            Some(Body::Typed(file)) => file.finish().map_err(parquet_io)?,
            None => return Ok(()),
        };
        file.sync_all()
    }
}

/// Writes one JSON line; returns the uncompressed bytes written (`sluice verify` renders the
/// line a record should have with it).
///
/// Straight into the file's buffer, piece by piece: no per-record string is built.
pub fn write_line<W: Write>(
    out: &mut W,
    record: &OutputRecord<'_>,
    settings: &FileSettings,
) -> io::Result<u64> {
    let row = &record.row;
    let value = row.value.trim();
    let mut line = Counted { out, written: 0 };
    if settings.metadata {
        // Metadata text has no raw line breaks: `topic_json` is serde_json's escaping.
        line.raw(b"{\"_topic\":")?;
        line.raw(record.topic_json.as_bytes())?;
        line.raw(b",\"_partition\":")?;
        line.raw(itoa::Buffer::new().format(row.partition).as_bytes())?;
        line.raw(b",\"_offset\":")?;
        line.raw(itoa::Buffer::new().format(row.offset).as_bytes())?;
        line.raw(b",\"_timestamp_ms\":")?;
        match row.timestamp_ms {
            Some(ms) => line.raw(itoa::Buffer::new().format(ms).as_bytes())?,
            None => line.raw(b"null")?,
        }
        line.raw(b",\"_key\":")?;
        match row.key {
            None => line.raw(b"null")?,
            // A JSON object, array or string key (CDC keys are objects) is kept as JSON;
            // anything else, numbers included, becomes a string, so `_key` has one meaning.
            Some(key)
                if matches!(key.trim_ascii_start().first(), Some(b'{' | b'[' | b'"'))
                    && serde_json::from_slice::<&serde_json::value::RawValue>(key).is_ok() =>
            {
                line.json(key)?;
            }
            // serde_json escapes control characters, so no raw line break gets through.
            Some(key) => serde_json::to_writer(&mut line, &*String::from_utf8_lossy(key))
                .map_err(io::Error::from)?,
        }
        if row.fields.is_some() {
            // The value's object, spliced after the metadata fields.
            let inner = &value[1..];
            if inner.trim_start().starts_with('}') {
                line.raw(b"}")?;
            } else {
                line.raw(b",")?;
                line.json(inner.as_bytes())?;
            }
        } else {
            line.raw(b",\"_value\":")?;
            line.json(value.as_bytes())?;
            line.raw(b"}")?;
        }
    } else {
        line.json(value.as_bytes())?;
    }
    line.raw(b"\n")?;
    Ok(line.written)
}

/// A line being written, with the bytes written so far.
struct Counted<'w, W> {
    out: &'w mut W,
    written: u64,
}

impl<W: Write> Counted<'_, W> {
    /// Text known to hold no raw line break.
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.written += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    /// JSON text; raw line breaks (only possible as whitespace in valid JSON) become spaces
    /// so that a record stays on one line. The search for them is memchr's vectorised one:
    /// a byte-at-a-time scan of every value was the files writer's largest cost.
    fn json(&mut self, bytes: &[u8]) -> io::Result<()> {
        if memchr::memchr2(b'\n', b'\r', bytes).is_none() {
            return self.raw(bytes);
        }
        let cleaned: Vec<u8> = bytes
            .iter()
            .map(|b| if *b == b'\n' || *b == b'\r' { b' ' } else { *b })
            .collect();
        self.raw(&cleaned)
    }
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
