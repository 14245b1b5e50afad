//! The decoder of `pgoutput` logical replication messages.
//!
//! Each XLogData message of the replication stream carries one pgoutput message: a one-byte tag
//! followed by big-endian fields ("Logical Replication Message Formats" in the PostgreSQL
//! protocol documentation). sluice starts replication with `proto_version '1'` and
//! `messages 'true'`, so it receives Begin, Commit, Origin, Relation, Type, Insert, Update,
//! Delete, Truncate and logical decoding Message messages, in protocol version 1 layout: no
//! transaction id before the fields of Relation, Insert, Update, Delete, Truncate and Message
//! (those appear only inside streamed transactions, protocol version 2 and later).
//!
//! Decoding is zero-copy for the bulky parts: column values and message contents are
//! [`Bytes`] slices of the input, which keeps the XLogData buffer alive until the last value
//! is encoded. Only names (relation, namespace, column, type, origin, message prefix) are
//! copied into owned [`String`]s, because they outlive the message in the relation cache.
//!
//! The input comes from the network, so the decoder never panics: every read is checked and a
//! short, malformed or unexpected message is a [`DecodeError`] naming what was being read.
//! A message must also be consumed exactly: trailing bytes are an error, since they would mean
//! that sluice and the server disagree about the layout. Streaming (`S`, `E`, `c`, `A`) and
//! two-phase (`b`, `P`, `K`, `r`, `p`) messages are never requested by sluice and decode to
//! [`DecodeError::Unsupported`].
//!
//! The message types are `pub` because [`super::encode`] exposes them in its public items; the
//! decoder itself, `decode`, stays crate-private.

use bytes::Bytes;
use sluice_engine::Lsn;

/// Microseconds between the Unix epoch (1970-01-01) and the PostgreSQL epoch (2000-01-01).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// Decodes one pgoutput message (the payload of one XLogData message).
///
/// Column values and message contents in the result are slices of `buf`.
///
/// # Errors
///
/// Returns a [`DecodeError`] when the message is truncated, has trailing bytes, has an unknown
/// tag or an unexpected tuple or column kind, holds a name that is not UTF-8, or is a
/// streaming or two-phase message, which sluice does not request.
pub(crate) fn decode(buf: Bytes) -> Result<PgOutputMessage, DecodeError> {
    let mut reader = Reader::new(buf);
    let tag = reader.u8("the message tag")?;
    let (message, kind) = match tag {
        b'B' => (PgOutputMessage::Begin(decode_begin(&mut reader)?), "Begin"),
        b'C' => (
            PgOutputMessage::Commit(decode_commit(&mut reader)?),
            "Commit",
        ),
        b'O' => (decode_origin(&mut reader)?, "Origin"),
        b'R' => (
            PgOutputMessage::Relation(decode_relation(&mut reader)?),
            "Relation",
        ),
        b'Y' => (decode_type(&mut reader)?, "Type"),
        b'I' => (decode_insert(&mut reader)?, "Insert"),
        b'U' => (decode_update(&mut reader)?, "Update"),
        b'D' => (decode_delete(&mut reader)?, "Delete"),
        b'T' => (decode_truncate(&mut reader)?, "Truncate"),
        b'M' => (decode_message(&mut reader)?, "Message"),
        other => {
            return Err(match unsupported_kind(other) {
                Some(kind) => DecodeError::Unsupported { kind },
                None => DecodeError::UnknownTag { tag: other },
            });
        }
    };
    reader.finish(kind)?;
    Ok(message)
}

/// One decoded pgoutput message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgOutputMessage {
    /// The start of a transaction (`B`).
    Begin(Begin),
    /// The end of a transaction (`C`).
    Commit(Commit),
    /// The origin of the transaction's changes, when they were replicated from elsewhere (`O`).
    Origin {
        /// The LSN of the commit on the origin server.
        commit_lsn: Lsn,
        /// The origin's name.
        name: String,
    },
    /// The description of a table, sent before the first change to it in a session and again
    /// whenever its definition changes (`R`).
    Relation(Relation),
    /// The description of a data type, sent before a change to a table with a column of a
    /// non-built-in type (`Y`).
    Type {
        /// The type's OID.
        id: u32,
        /// The type's schema (empty for `pg_catalog`).
        namespace: String,
        /// The type's name.
        name: String,
    },
    /// A row was inserted (`I`).
    Insert {
        /// The OID of the table, as in its [`Relation`] message.
        relation_id: u32,
        /// The new row.
        new: TupleData,
    },
    /// A row was updated (`U`).
    Update {
        /// The OID of the table, as in its [`Relation`] message.
        relation_id: u32,
        /// The whole old row (`O`), sent when the table's replica identity is `FULL`.
        old: Option<TupleData>,
        /// The old key (`K`), sent when the replica identity columns changed; the other
        /// columns are null.
        key: Option<TupleData>,
        /// The new row.
        new: TupleData,
    },
    /// A row was deleted (`D`).
    Delete {
        /// The OID of the table, as in its [`Relation`] message.
        relation_id: u32,
        /// The whole old row (`O`), sent when the table's replica identity is `FULL`.
        old: Option<TupleData>,
        /// The old key (`K`): the replica identity columns; the other columns are null.
        key: Option<TupleData>,
    },
    /// Tables were truncated (`T`).
    Truncate {
        /// Bit 1: `CASCADE`; bit 2: `RESTART IDENTITY`.
        options: u8,
        /// The OIDs of the truncated tables.
        relation_ids: Vec<u32>,
    },
    /// A logical decoding message written with `pg_logical_emit_message` (`M`).
    Message {
        /// Whether the message is part of a transaction (between Begin and Commit).
        transactional: bool,
        /// The LSN of the message.
        lsn: Lsn,
        /// The message's prefix.
        prefix: String,
        /// The message's content.
        content: Bytes,
    },
}

/// The start of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begin {
    /// The LSN of the transaction's commit record.
    pub final_lsn: Lsn,
    /// When the transaction committed.
    pub commit_time: PgTimestamp,
    /// The transaction id.
    pub xid: u32,
}

/// The end of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Flags; currently always 0.
    pub flags: u8,
    /// The LSN of the commit record.
    pub commit_lsn: Lsn,
    /// The end LSN of the transaction: where replication resumes after it.
    pub end_lsn: Lsn,
    /// When the transaction committed.
    pub commit_time: PgTimestamp,
}

/// The description of a table: its name, replica identity and columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// The table's OID, which later change messages refer to.
    pub id: u32,
    /// The table's schema (empty for `pg_catalog`).
    pub namespace: String,
    /// The table's name.
    pub name: String,
    /// The table's replica identity setting (`relreplident`).
    pub replica_identity: ReplicaIdentity,
    /// The published columns, in the order of tuple data. Generated columns are left out.
    pub columns: Vec<RelationColumn>,
}

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Whether the column is part of the replica identity (the key).
    pub is_key: bool,
    /// The column's name.
    pub name: String,
    /// The OID of the column's type.
    pub type_oid: u32,
    /// The column's type modifier (`atttypmod`), -1 when it has none.
    pub type_modifier: i32,
}

/// A table's replica identity: which old values updates and deletes carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplicaIdentity {
    /// The primary key, if any (`d`).
    Default,
    /// Nothing (`n`).
    Nothing,
    /// All columns (`f`).
    Full,
    /// The columns of a unique index (`i`).
    Index,
}

/// The column values of one row, in the order of the [`Relation`]'s columns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TupleData(pub Vec<Datum>);

/// One column value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datum {
    /// SQL `NULL` (`n`).
    Null,
    /// A TOASTed value that did not change; its value is not sent (`u`).
    UnchangedToast,
    /// A value in its type's text format (`t`).
    Text(Bytes),
    /// A value in its type's binary format (`b`); only sent when binary mode is requested.
    Binary(Bytes),
}

/// A PostgreSQL timestamp: microseconds since 2000-01-01 00:00:00 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PgTimestamp(pub i64);

impl PgTimestamp {
    /// Microseconds since the Unix epoch (1970-01-01 00:00:00 UTC), saturating at the bounds
    /// of `i64`.
    pub fn unix_micros(&self) -> i64 {
        self.0.saturating_add(PG_EPOCH_UNIX_MICROS)
    }

    /// Milliseconds since the Unix epoch, rounded towards negative infinity.
    pub fn unix_millis(&self) -> i64 {
        self.unix_micros().div_euclid(1000)
    }
}

/// Why a pgoutput message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The message ended before a field was complete.
    #[error("the message is truncated: it ends while reading {what}")]
    Truncated {
        /// The field that was being read.
        what: &'static str,
    },
    /// The message had bytes left after its last field.
    #[error("the {kind} message has {count} unexpected trailing bytes")]
    TrailingBytes {
        /// The kind of message.
        kind: &'static str,
        /// How many bytes were left.
        count: usize,
    },
    /// The message tag is not one pgoutput sends.
    #[error("unknown message tag 0x{tag:02x} ({:?})", char::from(*tag))]
    UnknownTag {
        /// The tag byte.
        tag: u8,
    },
    /// A streaming or two-phase message, which sluice never requests.
    #[error(
        "{kind} messages are not supported: sluice requests neither streaming nor two-phase decoding"
    )]
    Unsupported {
        /// The kind of message.
        kind: &'static str,
    },
    /// A tuple was introduced by a byte other than the ones allowed at that place.
    #[error(
        "unexpected tuple kind 0x{kind:02x} ({:?}) in the {message} message",
        char::from(*kind)
    )]
    UnexpectedTupleKind {
        /// The byte found.
        kind: u8,
        /// The kind of message.
        message: &'static str,
    },
    /// A column value was introduced by an unknown byte.
    #[error("unknown column value kind 0x{kind:02x} ({:?})", char::from(*kind))]
    UnknownColumnKind {
        /// The byte found.
        kind: u8,
    },
    /// A length field was negative.
    #[error("negative length {len} for {what}")]
    NegativeLength {
        /// The field whose length it is.
        what: &'static str,
        /// The length found.
        len: i32,
    },
    /// The replica identity byte of a Relation message is unknown.
    #[error("unknown replica identity 0x{0:02x}")]
    UnknownReplicaIdentity(u8),
    /// A name was not valid UTF-8.
    #[error("{what} is not valid UTF-8")]
    InvalidUtf8 {
        /// The field that held the name.
        what: &'static str,
    },
}

/// The name of a message kind that sluice never requests, if `tag` is one.
fn unsupported_kind(tag: u8) -> Option<&'static str> {
    Some(match tag {
        b'S' => "Stream Start",
        b'E' => "Stream Stop",
        b'c' => "Stream Commit",
        b'A' => "Stream Abort",
        b'p' => "Stream Prepare",
        b'b' => "Begin Prepare",
        b'P' => "Prepare",
        b'K' => "Commit Prepared",
        b'r' => "Rollback Prepared",
        _ => return None,
    })
}

/// Decodes the fields of a Begin message.
fn decode_begin(reader: &mut Reader) -> Result<Begin, DecodeError> {
    Ok(Begin {
        final_lsn: Lsn(reader.u64("the final LSN of a Begin message")?),
        commit_time: PgTimestamp(reader.i64("the commit time of a Begin message")?),
        xid: reader.u32("the transaction id of a Begin message")?,
    })
}

/// Decodes the fields of a Commit message.
fn decode_commit(reader: &mut Reader) -> Result<Commit, DecodeError> {
    Ok(Commit {
        flags: reader.u8("the flags of a Commit message")?,
        commit_lsn: Lsn(reader.u64("the commit LSN of a Commit message")?),
        end_lsn: Lsn(reader.u64("the end LSN of a Commit message")?),
        commit_time: PgTimestamp(reader.i64("the commit time of a Commit message")?),
    })
}

/// Decodes the fields of an Origin message.
fn decode_origin(reader: &mut Reader) -> Result<PgOutputMessage, DecodeError> {
    Ok(PgOutputMessage::Origin {
        commit_lsn: Lsn(reader.u64("the commit LSN of an Origin message")?),
        name: reader.string("the name of an Origin message")?,
    })
}

/// Decodes the fields of a Relation message.
fn decode_relation(reader: &mut Reader) -> Result<Relation, DecodeError> {
    let id = reader.u32("the id of a Relation message")?;
    let namespace = reader.string("the namespace of a Relation message")?;
    let name = reader.string("the name of a Relation message")?;
    let replica_identity = match reader.u8("the replica identity of a Relation message")? {
        b'd' => ReplicaIdentity::Default,
        b'n' => ReplicaIdentity::Nothing,
        b'f' => ReplicaIdentity::Full,
        b'i' => ReplicaIdentity::Index,
        other => return Err(DecodeError::UnknownReplicaIdentity(other)),
    };
    let count = usize::from(reader.u16("the column count of a Relation message")?);
    // Each column takes at least 10 bytes, so a forged count cannot reserve much memory.
    let mut columns = Vec::with_capacity(count.min(reader.remaining() / 10));
    for _ in 0..count {
        let flags = reader.u8("the flags of a Relation column")?;
        columns.push(RelationColumn {
            is_key: flags & 1 != 0,
            name: reader.string("the name of a Relation column")?,
            type_oid: reader.u32("the type OID of a Relation column")?,
            type_modifier: reader.i32("the type modifier of a Relation column")?,
        });
    }
    Ok(Relation {
        id,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

/// Decodes the fields of a Type message.
fn decode_type(reader: &mut Reader) -> Result<PgOutputMessage, DecodeError> {
    Ok(PgOutputMessage::Type {
        id: reader.u32("the id of a Type message")?,
        namespace: reader.string("the namespace of a Type message")?,
        name: reader.string("the name of a Type message")?,
    })
}

/// Decodes the fields of an Insert message.
fn decode_insert(reader: &mut Reader) -> Result<PgOutputMessage, DecodeError> {
    let relation_id = reader.u32("the relation id of an Insert message")?;
    match reader.u8("the tuple kind of an Insert message")? {
        b'N' => {}
        kind => {
            return Err(DecodeError::UnexpectedTupleKind {
                kind,
                message: "Insert",
            });
        }
    }
    Ok(PgOutputMessage::Insert {
        relation_id,
        new: decode_tuple(reader)?,
    })
}

/// Decodes the fields of an Update message: an optional old key (`K`) or old row (`O`), then
/// the new row (`N`).
fn decode_update(reader: &mut Reader) -> Result<PgOutputMessage, DecodeError> {
    let relation_id = reader.u32("the relation id of an Update message")?;
    let mut old = None;
    let mut key = None;
    let mut kind = reader.u8("the tuple kind of an Update message")?;
    match kind {
        b'K' => {
            key = Some(decode_tuple(reader)?);
            kind = reader.u8("the new tuple kind of an Update message")?;
        }
        b'O' => {
            old = Some(decode_tuple(reader)?);
            kind = reader.u8("the new tuple kind of an Update message")?;
        }
        _ => {}
    }
    if kind != b'N' {
        return Err(DecodeError::UnexpectedTupleKind {
            kind,
            message: "Update",
        });
    }
    Ok(PgOutputMessage::Update {
        relation_id,
        old,
        key,
        new: decode_tuple(reader)?,
    })
}

/// Decodes the fields of a Delete message: the old key (`K`) or the old row (`O`).
fn decode_delete(reader: &mut Reader) -> Result<PgOutputMessage, DecodeError> {
    let relation_id = reader.u32("the relation id of a Delete message")?;
    let (old, key) = match reader.u8("the tuple kind of a Delete message")? {
        b'K' => (None, Some(decode_tuple(reader)?)),
        b'O' => (Some(decode_tuple(reader)?), None),
        kind => {
            return Err(DecodeError::UnexpectedTupleKind {
                kind,
                message: "Delete",
            });
        }
    };
    Ok(PgOutputMessage::Delete {
        relation_id,
        old,
        key,
    })
}

/// Decodes the fields of a Truncate message.
fn decode_truncate(reader: &mut Reader) -> Result<PgOutputMessage, DecodeError> {
    let what = "the relation count of a Truncate message";
    let count = reader.i32(what)?;
    let count =
        usize::try_from(count).map_err(|_| DecodeError::NegativeLength { what, len: count })?;
    let options = reader.u8("the options of a Truncate message")?;
    let mut relation_ids = Vec::with_capacity(count.min(reader.remaining() / 4));
    for _ in 0..count {
        relation_ids.push(reader.u32("a relation id of a Truncate message")?);
    }
    Ok(PgOutputMessage::Truncate {
        options,
        relation_ids,
    })
}

/// Decodes the fields of a logical decoding Message message.
fn decode_message(reader: &mut Reader) -> Result<PgOutputMessage, DecodeError> {
    let flags = reader.u8("the flags of a Message message")?;
    let lsn = Lsn(reader.u64("the LSN of a Message message")?);
    let prefix = reader.string("the prefix of a Message message")?;
    let what = "the content of a Message message";
    let len = reader.i32(what)?;
    let len = usize::try_from(len).map_err(|_| DecodeError::NegativeLength { what, len })?;
    let content = reader.bytes(len, what)?;
    Ok(PgOutputMessage::Message {
        transactional: flags & 1 != 0,
        lsn,
        prefix,
        content,
    })
}

/// Decodes a TupleData structure: a column count, then one value per column.
fn decode_tuple(reader: &mut Reader) -> Result<TupleData, DecodeError> {
    let count = usize::from(reader.u16("the column count of a tuple")?);
    // Each value takes at least one byte, so a forged count cannot reserve much memory.
    let mut values = Vec::with_capacity(count.min(reader.remaining()));
    for _ in 0..count {
        let datum = match reader.u8("the kind of a column value")? {
            b'n' => Datum::Null,
            b'u' => Datum::UnchangedToast,
            kind @ (b't' | b'b') => {
                let what = "a column value";
                let len = reader.i32(what)?;
                let len =
                    usize::try_from(len).map_err(|_| DecodeError::NegativeLength { what, len })?;
                let data = reader.bytes(len, what)?;
                if kind == b't' {
                    Datum::Text(data)
                } else {
                    Datum::Binary(data)
                }
            }
            kind => return Err(DecodeError::UnknownColumnKind { kind }),
        };
        values.push(datum);
    }
    Ok(TupleData(values))
}

/// A checked, big-endian reader over one message.
struct Reader {
    /// The whole message.
    buf: Bytes,
    /// The offset of the next unread byte.
    pos: usize,
}

impl Reader {
    /// Starts reading `buf` at its first byte.
    fn new(buf: Bytes) -> Self {
        Self { buf, pos: 0 }
    }

    /// How many bytes are left.
    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Takes the next `N` bytes.
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let end = self
            .pos
            .checked_add(N)
            .ok_or(DecodeError::Truncated { what })?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .and_then(|slice| <[u8; N]>::try_from(slice).ok())
            .ok_or(DecodeError::Truncated { what })?;
        self.pos = end;
        Ok(bytes)
    }

    /// Reads an Int8 as unsigned.
    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(u8::from_be_bytes(self.array(what)?))
    }

    /// Reads an Int16 as unsigned.
    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    /// Reads an Int32.
    fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    /// Reads an Int32 as unsigned (OIDs and transaction ids).
    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// Reads an Int64.
    fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// Reads an Int64 as unsigned (LSNs).
    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// Takes the next `len` bytes as a slice of the message, without copying.
    fn bytes(&mut self, len: usize, what: &'static str) -> Result<Bytes, DecodeError> {
        let end = self
            .pos
            .checked_add(len)
            .ok_or(DecodeError::Truncated { what })?;
        if end > self.buf.len() {
            return Err(DecodeError::Truncated { what });
        }
        let bytes = self.buf.slice(self.pos..end);
        self.pos = end;
        Ok(bytes)
    }

    /// Reads a null-terminated UTF-8 string.
    fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let rest = self
            .buf
            .get(self.pos..)
            .ok_or(DecodeError::Truncated { what })?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(DecodeError::Truncated { what })?;
        let text = rest.get(..len).ok_or(DecodeError::Truncated { what })?;
        let text = std::str::from_utf8(text).map_err(|_| DecodeError::InvalidUtf8 { what })?;
        let text = text.to_owned();
        // The string and its terminating zero byte.
        self.pos = self.pos.saturating_add(len).saturating_add(1);
        Ok(text)
    }

    /// Checks that the whole message was read.
    fn finish(self, kind: &'static str) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes { kind, count }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds a message byte by byte, as the server would send it.
    #[derive(Default, Clone)]
    struct MessageBuilder(Vec<u8>);

    impl MessageBuilder {
        fn tag(tag: u8) -> Self {
            Self(vec![tag])
        }

        fn u8(mut self, value: u8) -> Self {
            self.0.push(value);
            self
        }

        fn i16(mut self, value: i16) -> Self {
            self.0.extend_from_slice(&value.to_be_bytes());
            self
        }

        fn i32(mut self, value: i32) -> Self {
            self.0.extend_from_slice(&value.to_be_bytes());
            self
        }

        fn u32(mut self, value: u32) -> Self {
            self.0.extend_from_slice(&value.to_be_bytes());
            self
        }

        fn i64(mut self, value: i64) -> Self {
            self.0.extend_from_slice(&value.to_be_bytes());
            self
        }

        fn u64(mut self, value: u64) -> Self {
            self.0.extend_from_slice(&value.to_be_bytes());
            self
        }

        fn string(mut self, value: &str) -> Self {
            self.0.extend_from_slice(value.as_bytes());
            self.0.push(0);
            self
        }

        fn raw(mut self, value: &[u8]) -> Self {
            self.0.extend_from_slice(value);
            self
        }

        /// Appends TupleData: `None` is null, `Some(None)` unchanged TOAST, else text.
        fn tuple(mut self, values: &[Option<Option<&str>>]) -> Self {
            self = self.i16(i16::try_from(values.len()).expect("few columns"));
            for value in values {
                self = match value {
                    None => self.u8(b'n'),
                    Some(None) => self.u8(b'u'),
                    Some(Some(text)) => self
                        .u8(b't')
                        .i32(i32::try_from(text.len()).expect("short value"))
                        .raw(text.as_bytes()),
                };
            }
            self
        }

        fn build(self) -> Vec<u8> {
            self.0
        }
    }

    fn decode_slice(bytes: &[u8]) -> Result<PgOutputMessage, DecodeError> {
        decode(Bytes::copy_from_slice(bytes))
    }

    fn text(value: &str) -> Datum {
        Datum::Text(Bytes::copy_from_slice(value.as_bytes()))
    }

    fn begin() -> Vec<u8> {
        MessageBuilder::tag(b'B')
            .u64(0x0000_0001_0000_0A00)
            .i64(757_382_400_000_000)
            .u32(4242)
            .build()
    }

    fn commit() -> Vec<u8> {
        MessageBuilder::tag(b'C')
            .u8(0)
            .u64(0x1_0000_0A00)
            .u64(0x1_0000_0A38)
            .i64(-1)
            .build()
    }

    fn origin() -> Vec<u8> {
        MessageBuilder::tag(b'O').u64(77).string("upstream").build()
    }

    fn relation() -> Vec<u8> {
        MessageBuilder::tag(b'R')
            .u32(16384)
            .string("public")
            .string("accounts")
            .u8(b'd')
            .i16(3)
            .u8(1)
            .string("id")
            .u32(23)
            .i32(-1)
            .u8(0)
            .string("name")
            .u32(1043)
            .i32(68)
            .u8(0)
            .string("créé")
            .u32(1184)
            .i32(3)
            .build()
    }

    fn type_message() -> Vec<u8> {
        MessageBuilder::tag(b'Y')
            .u32(90001)
            .string("")
            .string("mood")
            .build()
    }

    fn insert() -> Vec<u8> {
        MessageBuilder::tag(b'I')
            .u32(16384)
            .u8(b'N')
            .tuple(&[Some(Some("1")), None, Some(Some("héllo"))])
            .build()
    }

    fn update_plain() -> Vec<u8> {
        MessageBuilder::tag(b'U')
            .u32(16384)
            .u8(b'N')
            .tuple(&[Some(Some("1")), Some(None), Some(Some(""))])
            .build()
    }

    fn update_key() -> Vec<u8> {
        MessageBuilder::tag(b'U')
            .u32(16384)
            .u8(b'K')
            .tuple(&[Some(Some("1")), None, None])
            .u8(b'N')
            .tuple(&[Some(Some("2")), Some(None), Some(Some("x"))])
            .build()
    }

    fn update_old() -> Vec<u8> {
        MessageBuilder::tag(b'U')
            .u32(16384)
            .u8(b'O')
            .tuple(&[Some(Some("1")), Some(Some("a")), None])
            .u8(b'N')
            .tuple(&[Some(Some("1")), Some(Some("b")), None])
            .build()
    }

    fn delete_key() -> Vec<u8> {
        MessageBuilder::tag(b'D')
            .u32(16384)
            .u8(b'K')
            .tuple(&[Some(Some("7")), None, None])
            .build()
    }

    fn delete_old() -> Vec<u8> {
        MessageBuilder::tag(b'D')
            .u32(16384)
            .u8(b'O')
            .tuple(&[Some(Some("7")), Some(Some("z")), Some(None)])
            .build()
    }

    fn truncate() -> Vec<u8> {
        MessageBuilder::tag(b'T')
            .i32(2)
            .u8(3)
            .u32(16384)
            .u32(16390)
            .build()
    }

    fn message() -> Vec<u8> {
        MessageBuilder::tag(b'M')
            .u8(1)
            .u64(0x2_0000_0010)
            .string("sluice.heartbeat")
            .i32(3)
            .raw(&[0, 1, 0xff])
            .build()
    }

    fn binary_insert() -> Vec<u8> {
        MessageBuilder::tag(b'I')
            .u32(5)
            .u8(b'N')
            .i16(1)
            .u8(b'b')
            .i32(4)
            .raw(&[0, 0, 0, 42])
            .build()
    }

    /// Every valid message the tests build.
    fn valid_messages() -> Vec<Vec<u8>> {
        vec![
            begin(),
            commit(),
            origin(),
            relation(),
            type_message(),
            insert(),
            update_plain(),
            update_key(),
            update_old(),
            delete_key(),
            delete_old(),
            truncate(),
            message(),
            binary_insert(),
        ]
    }

    #[test]
    fn decodes_begin() {
        let decoded = decode_slice(&begin()).expect("valid");
        assert_eq!(
            decoded,
            PgOutputMessage::Begin(Begin {
                final_lsn: Lsn(0x1_0000_0A00),
                commit_time: PgTimestamp(757_382_400_000_000),
                xid: 4242,
            })
        );
        let PgOutputMessage::Begin(begin) = decoded else {
            unreachable!()
        };
        assert_eq!(begin.final_lsn.to_string(), "1/A00");
        // 2024-01-01 00:00:00 UTC.
        assert_eq!(begin.commit_time.unix_micros(), 1_704_067_200_000_000);
        assert_eq!(begin.commit_time.unix_millis(), 1_704_067_200_000);
    }

    #[test]
    fn decodes_commit() {
        assert_eq!(
            decode_slice(&commit()).expect("valid"),
            PgOutputMessage::Commit(Commit {
                flags: 0,
                commit_lsn: Lsn(0x1_0000_0A00),
                end_lsn: Lsn(0x1_0000_0A38),
                commit_time: PgTimestamp(-1),
            })
        );
    }

    #[test]
    fn timestamps_convert_to_unix_time() {
        assert_eq!(PgTimestamp(0).unix_micros(), 946_684_800_000_000);
        assert_eq!(PgTimestamp(-1).unix_millis(), 946_684_799_999);
        assert_eq!(PgTimestamp(i64::MAX).unix_micros(), i64::MAX);
        assert_eq!(
            PgTimestamp(i64::MIN).unix_millis(),
            i64::MIN.div_euclid(1000) + 946_684_800_000
        );
    }

    #[test]
    fn decodes_origin() {
        assert_eq!(
            decode_slice(&origin()).expect("valid"),
            PgOutputMessage::Origin {
                commit_lsn: Lsn(77),
                name: "upstream".into(),
            }
        );
    }

    #[test]
    fn decodes_relation() {
        assert_eq!(
            decode_slice(&relation()).expect("valid"),
            PgOutputMessage::Relation(Relation {
                id: 16384,
                namespace: "public".into(),
                name: "accounts".into(),
                replica_identity: ReplicaIdentity::Default,
                columns: vec![
                    RelationColumn {
                        is_key: true,
                        name: "id".into(),
                        type_oid: 23,
                        type_modifier: -1,
                    },
                    RelationColumn {
                        is_key: false,
                        name: "name".into(),
                        type_oid: 1043,
                        type_modifier: 68,
                    },
                    RelationColumn {
                        is_key: false,
                        name: "créé".into(),
                        type_oid: 1184,
                        type_modifier: 3,
                    },
                ],
            })
        );
    }

    #[test]
    fn decodes_every_replica_identity() {
        for (byte, identity) in [
            (b'd', ReplicaIdentity::Default),
            (b'n', ReplicaIdentity::Nothing),
            (b'f', ReplicaIdentity::Full),
            (b'i', ReplicaIdentity::Index),
        ] {
            let bytes = MessageBuilder::tag(b'R')
                .u32(1)
                .string("s")
                .string("t")
                .u8(byte)
                .i16(0)
                .build();
            let PgOutputMessage::Relation(relation) = decode_slice(&bytes).expect("valid") else {
                panic!("not a relation");
            };
            assert_eq!(relation.replica_identity, identity);
            assert!(relation.columns.is_empty());
        }
        let bytes = MessageBuilder::tag(b'R')
            .u32(1)
            .string("s")
            .string("t")
            .u8(b'x')
            .i16(0)
            .build();
        assert_eq!(
            decode_slice(&bytes),
            Err(DecodeError::UnknownReplicaIdentity(b'x'))
        );
    }

    #[test]
    fn decodes_type() {
        assert_eq!(
            decode_slice(&type_message()).expect("valid"),
            PgOutputMessage::Type {
                id: 90001,
                namespace: String::new(),
                name: "mood".into(),
            }
        );
    }

    #[test]
    fn decodes_insert_with_null_and_text() {
        assert_eq!(
            decode_slice(&insert()).expect("valid"),
            PgOutputMessage::Insert {
                relation_id: 16384,
                new: TupleData(vec![text("1"), Datum::Null, text("héllo")]),
            }
        );
    }

    #[test]
    fn decodes_binary_values() {
        assert_eq!(
            decode_slice(&binary_insert()).expect("valid"),
            PgOutputMessage::Insert {
                relation_id: 5,
                new: TupleData(vec![Datum::Binary(Bytes::from_static(&[0, 0, 0, 42]))]),
            }
        );
    }

    #[test]
    fn values_are_slices_of_the_input() {
        let input = Bytes::from(insert());
        let PgOutputMessage::Insert { new, .. } = decode(input.clone()).expect("valid") else {
            panic!("not an insert");
        };
        let Some(Datum::Text(value)) = new.0.get(2) else {
            panic!("not text");
        };
        let input_range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
        assert!(input_range.contains(&(value.as_ptr() as usize)));
    }

    #[test]
    fn decodes_update_without_old_values() {
        assert_eq!(
            decode_slice(&update_plain()).expect("valid"),
            PgOutputMessage::Update {
                relation_id: 16384,
                old: None,
                key: None,
                new: TupleData(vec![text("1"), Datum::UnchangedToast, text("")]),
            }
        );
    }

    #[test]
    fn decodes_update_with_old_key() {
        assert_eq!(
            decode_slice(&update_key()).expect("valid"),
            PgOutputMessage::Update {
                relation_id: 16384,
                old: None,
                key: Some(TupleData(vec![text("1"), Datum::Null, Datum::Null])),
                new: TupleData(vec![text("2"), Datum::UnchangedToast, text("x")]),
            }
        );
    }

    #[test]
    fn decodes_update_with_old_row() {
        assert_eq!(
            decode_slice(&update_old()).expect("valid"),
            PgOutputMessage::Update {
                relation_id: 16384,
                old: Some(TupleData(vec![text("1"), text("a"), Datum::Null])),
                key: None,
                new: TupleData(vec![text("1"), text("b"), Datum::Null]),
            }
        );
    }

    #[test]
    fn decodes_deletes() {
        assert_eq!(
            decode_slice(&delete_key()).expect("valid"),
            PgOutputMessage::Delete {
                relation_id: 16384,
                old: None,
                key: Some(TupleData(vec![text("7"), Datum::Null, Datum::Null])),
            }
        );
        assert_eq!(
            decode_slice(&delete_old()).expect("valid"),
            PgOutputMessage::Delete {
                relation_id: 16384,
                old: Some(TupleData(vec![text("7"), text("z"), Datum::UnchangedToast])),
                key: None,
            }
        );
    }

    #[test]
    fn decodes_truncate() {
        assert_eq!(
            decode_slice(&truncate()).expect("valid"),
            PgOutputMessage::Truncate {
                options: 3,
                relation_ids: vec![16384, 16390],
            }
        );
    }

    #[test]
    fn decodes_messages() {
        assert_eq!(
            decode_slice(&message()).expect("valid"),
            PgOutputMessage::Message {
                transactional: true,
                lsn: Lsn(0x2_0000_0010),
                prefix: "sluice.heartbeat".into(),
                content: Bytes::from_static(&[0, 1, 0xff]),
            }
        );
        let bytes = MessageBuilder::tag(b'M')
            .u8(0)
            .u64(9)
            .string("p")
            .i32(0)
            .build();
        assert_eq!(
            decode_slice(&bytes).expect("valid"),
            PgOutputMessage::Message {
                transactional: false,
                lsn: Lsn(9),
                prefix: "p".into(),
                content: Bytes::new(),
            }
        );
    }

    #[test]
    fn rejects_streaming_and_two_phase_messages() {
        for (tag, kind) in [
            (b'S', "Stream Start"),
            (b'E', "Stream Stop"),
            (b'c', "Stream Commit"),
            (b'A', "Stream Abort"),
            (b'p', "Stream Prepare"),
            (b'b', "Begin Prepare"),
            (b'P', "Prepare"),
            (b'K', "Commit Prepared"),
            (b'r', "Rollback Prepared"),
        ] {
            let bytes = MessageBuilder::tag(tag).u32(1).u8(0).build();
            assert_eq!(decode_slice(&bytes), Err(DecodeError::Unsupported { kind }));
        }
    }

    #[test]
    fn rejects_unknown_tags_and_empty_input() {
        assert_eq!(
            decode_slice(b"Z"),
            Err(DecodeError::UnknownTag { tag: b'Z' })
        );
        assert_eq!(
            decode_slice(b""),
            Err(DecodeError::Truncated {
                what: "the message tag"
            })
        );
        let error = decode_slice(&[0x01]).expect_err("unknown");
        assert_eq!(error.to_string(), "unknown message tag 0x01 ('\\u{1}')");
    }

    #[test]
    fn rejects_unexpected_tuple_kinds() {
        let insert = MessageBuilder::tag(b'I').u32(1).u8(b'K').tuple(&[]).build();
        assert_eq!(
            decode_slice(&insert),
            Err(DecodeError::UnexpectedTupleKind {
                kind: b'K',
                message: "Insert"
            })
        );
        let update = MessageBuilder::tag(b'U').u32(1).u8(b'X').tuple(&[]).build();
        assert_eq!(
            decode_slice(&update),
            Err(DecodeError::UnexpectedTupleKind {
                kind: b'X',
                message: "Update"
            })
        );
        // Two old tuples: the second marker must be the new tuple's.
        let update = MessageBuilder::tag(b'U')
            .u32(1)
            .u8(b'K')
            .tuple(&[])
            .u8(b'O')
            .tuple(&[])
            .build();
        assert_eq!(
            decode_slice(&update),
            Err(DecodeError::UnexpectedTupleKind {
                kind: b'O',
                message: "Update"
            })
        );
        let delete = MessageBuilder::tag(b'D').u32(1).u8(b'N').tuple(&[]).build();
        assert_eq!(
            decode_slice(&delete),
            Err(DecodeError::UnexpectedTupleKind {
                kind: b'N',
                message: "Delete"
            })
        );
    }

    #[test]
    fn rejects_bad_column_values() {
        let unknown = MessageBuilder::tag(b'I')
            .u32(1)
            .u8(b'N')
            .i16(1)
            .u8(b'q')
            .build();
        assert_eq!(
            decode_slice(&unknown),
            Err(DecodeError::UnknownColumnKind { kind: b'q' })
        );
        let negative = MessageBuilder::tag(b'I')
            .u32(1)
            .u8(b'N')
            .i16(1)
            .u8(b't')
            .i32(-5)
            .build();
        assert_eq!(
            decode_slice(&negative),
            Err(DecodeError::NegativeLength {
                what: "a column value",
                len: -5
            })
        );
        let huge = MessageBuilder::tag(b'I')
            .u32(1)
            .u8(b'N')
            .i16(1)
            .u8(b't')
            .i32(i32::MAX)
            .raw(b"abc")
            .build();
        assert_eq!(
            decode_slice(&huge),
            Err(DecodeError::Truncated {
                what: "a column value"
            })
        );
    }

    #[test]
    fn rejects_forged_counts() {
        let columns = MessageBuilder::tag(b'I').u32(1).u8(b'N').i16(-1).build();
        assert!(matches!(
            decode_slice(&columns),
            Err(DecodeError::Truncated { .. })
        ));
        let relations = MessageBuilder::tag(b'T').i32(i32::MAX).u8(0).u32(1).build();
        assert!(matches!(
            decode_slice(&relations),
            Err(DecodeError::Truncated { .. })
        ));
        let negative = MessageBuilder::tag(b'T').i32(-1).u8(0).build();
        assert!(matches!(
            decode_slice(&negative),
            Err(DecodeError::NegativeLength { len: -1, .. })
        ));
        let content = MessageBuilder::tag(b'M')
            .u8(0)
            .u64(1)
            .string("p")
            .i32(-1)
            .build();
        assert!(matches!(
            decode_slice(&content),
            Err(DecodeError::NegativeLength { len: -1, .. })
        ));
    }

    #[test]
    fn rejects_invalid_utf8_names() {
        let bytes = MessageBuilder::tag(b'Y')
            .u32(1)
            .raw(b"\xff\xfe\0")
            .string("t")
            .build();
        assert_eq!(
            decode_slice(&bytes),
            Err(DecodeError::InvalidUtf8 {
                what: "the namespace of a Type message"
            })
        );
    }

    #[test]
    fn rejects_trailing_bytes() {
        for mut bytes in valid_messages() {
            bytes.push(0);
            assert!(
                matches!(
                    decode_slice(&bytes),
                    Err(DecodeError::TrailingBytes { count: 1, .. })
                ),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for bytes in valid_messages() {
            assert!(decode_slice(&bytes).is_ok(), "{bytes:?}");
            for len in 0..bytes.len() {
                let prefix = bytes.get(..len).expect("in range");
                assert!(decode_slice(prefix).is_err(), "prefix {len} of {bytes:?}");
            }
        }
    }

    /// A random edit of a message.
    #[derive(Debug, Clone)]
    enum Mutation {
        Flip { at: usize, bits: u8 },
        Insert { at: usize, byte: u8 },
        Remove { at: usize },
        Truncate { at: usize },
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        prop_oneof![
            (any::<usize>(), 1..=255u8).prop_map(|(at, bits)| Mutation::Flip { at, bits }),
            (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert { at, byte }),
            any::<usize>().prop_map(|at| Mutation::Remove { at }),
            any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        ]
    }

    fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
        if bytes.is_empty() {
            return;
        }
        match *mutation {
            Mutation::Flip { at, bits } => {
                let at = at % bytes.len();
                if let Some(byte) = bytes.get_mut(at) {
                    *byte ^= bits;
                }
            }
            Mutation::Insert { at, byte } => bytes.insert(at % (bytes.len() + 1), byte),
            Mutation::Remove { at } => {
                bytes.remove(at % bytes.len());
            }
            Mutation::Truncate { at } => bytes.truncate(at % bytes.len()),
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_slice(&bytes);
        }

        #[test]
        fn never_panics_on_arbitrary_bodies(
            tag in proptest::sample::select(b"BCORYIUDTMSEcApbPKr".to_vec()),
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let mut bytes = vec![tag];
            bytes.extend_from_slice(&body);
            let _ = decode_slice(&bytes);
        }

        #[test]
        fn never_panics_on_mutated_messages(
            index in 0..14usize,
            mutations in proptest::collection::vec(mutation(), 1..8),
        ) {
            let messages = valid_messages();
            let mut bytes = messages.get(index % messages.len()).cloned().unwrap_or_default();
            for mutation in &mutations {
                apply(&mut bytes, mutation);
            }
            let _ = decode_slice(&bytes);
        }
    }
}
