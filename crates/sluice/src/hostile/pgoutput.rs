//! pgoutput messages: what the server may send, encoded by the protocol's layout, decodes to
//! itself; forged counts and lengths allocate by the bytes that came. (Random bytes, random
//! bodies behind every tag and mutated valid messages are `source::postgres::pgoutput`'s own
//! properties; `scripts/fuzz` runs those too.)

use bytes::{BufMut, Bytes};
use proptest::prelude::*;
use sluice_engine::Lsn;

use crate::source::postgres::pgoutput::{
    Begin, Commit, Datum, PgOutputMessage, PgTimestamp, Relation, RelationColumn, ReplicaIdentity,
    TupleData, decode,
};

/// A name as the server sends it: a C string (no NUL), UTF-8.
fn name() -> impl Strategy<Value = String> {
    "[^\\x00]{0,12}"
}

fn datum() -> impl Strategy<Value = Datum> {
    prop_oneof![
        Just(Datum::Null),
        Just(Datum::UnchangedToast),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(|v| Datum::Text(Bytes::from(v))),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(|v| Datum::Binary(Bytes::from(v))),
    ]
}

fn tuple() -> impl Strategy<Value = TupleData> {
    proptest::collection::vec(datum(), 0..8).prop_map(TupleData)
}

fn message() -> impl Strategy<Value = PgOutputMessage> {
    let identity = prop_oneof![
        Just(ReplicaIdentity::Default),
        Just(ReplicaIdentity::Nothing),
        Just(ReplicaIdentity::Full),
        Just(ReplicaIdentity::Index),
    ];
    let column = (any::<bool>(), name(), any::<u32>(), any::<i32>()).prop_map(
        |(is_key, name, type_oid, type_modifier)| RelationColumn {
            is_key,
            name,
            type_oid,
            type_modifier,
        },
    );
    prop_oneof![
        (any::<u64>(), any::<i64>(), any::<u32>()).prop_map(|(lsn, time, xid)| {
            PgOutputMessage::Begin(Begin {
                final_lsn: Lsn(lsn),
                commit_time: PgTimestamp(time),
                xid,
            })
        }),
        (any::<u8>(), any::<u64>(), any::<u64>(), any::<i64>()).prop_map(
            |(flags, commit, end, time)| PgOutputMessage::Commit(Commit {
                flags,
                commit_lsn: Lsn(commit),
                end_lsn: Lsn(end),
                commit_time: PgTimestamp(time),
            })
        ),
        (any::<u64>(), name()).prop_map(|(lsn, name)| PgOutputMessage::Origin {
            commit_lsn: Lsn(lsn),
            name,
        }),
        (
            any::<u32>(),
            name(),
            name(),
            identity,
            proptest::collection::vec(column, 0..6)
        )
            .prop_map(|(id, namespace, name, replica_identity, columns)| {
                PgOutputMessage::Relation(Relation {
                    id,
                    namespace,
                    name,
                    replica_identity,
                    columns,
                })
            }),
        (any::<u32>(), name(), name()).prop_map(|(id, namespace, name)| PgOutputMessage::Type {
            id,
            namespace,
            name
        }),
        (any::<u32>(), tuple())
            .prop_map(|(relation_id, new)| PgOutputMessage::Insert { relation_id, new }),
        (any::<u32>(), 0..3u8, tuple(), tuple()).prop_map(|(relation_id, which, old, new)| {
            PgOutputMessage::Update {
                relation_id,
                old: (which == 1).then(|| old.clone()),
                key: (which == 2).then_some(old),
                new,
            }
        }),
        (any::<u32>(), any::<bool>(), tuple()).prop_map(|(relation_id, full, old)| {
            PgOutputMessage::Delete {
                relation_id,
                old: full.then(|| old.clone()),
                key: (!full).then_some(old),
            }
        }),
        (any::<u8>(), proptest::collection::vec(any::<u32>(), 0..8)).prop_map(
            |(options, relation_ids)| PgOutputMessage::Truncate {
                options,
                relation_ids
            }
        ),
        (
            any::<bool>(),
            any::<u64>(),
            name(),
            proptest::collection::vec(any::<u8>(), 0..32)
        )
            .prop_map(|(transactional, lsn, prefix, content)| {
                PgOutputMessage::Message {
                    transactional,
                    lsn: Lsn(lsn),
                    prefix,
                    content: Bytes::from(content),
                }
            }),
    ]
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    out.put_slice(name.as_bytes());
    out.put_u8(0);
}

fn put_tuple(out: &mut Vec<u8>, tuple: &TupleData) {
    out.put_u16(u16::try_from(tuple.0.len()).expect("a small tuple"));
    for datum in &tuple.0 {
        match datum {
            Datum::Null => out.put_u8(b'n'),
            Datum::UnchangedToast => out.put_u8(b'u'),
            Datum::Text(data) | Datum::Binary(data) => {
                out.put_u8(if matches!(datum, Datum::Text(_)) {
                    b't'
                } else {
                    b'b'
                });
                out.put_i32(i32::try_from(data.len()).expect("a small value"));
                out.put_slice(data);
            }
        }
    }
}

/// `message` in the layout of PostgreSQL's "Logical Replication Message Formats" (protocol
/// version 1), written from the documentation independently of the decoder.
fn encode(message: &PgOutputMessage) -> Vec<u8> {
    let mut out = Vec::new();
    match message {
        PgOutputMessage::Begin(begin) => {
            out.put_u8(b'B');
            out.put_u64(begin.final_lsn.0);
            out.put_i64(begin.commit_time.0);
            out.put_u32(begin.xid);
        }
        PgOutputMessage::Commit(commit) => {
            out.put_u8(b'C');
            out.put_u8(commit.flags);
            out.put_u64(commit.commit_lsn.0);
            out.put_u64(commit.end_lsn.0);
            out.put_i64(commit.commit_time.0);
        }
        PgOutputMessage::Origin { commit_lsn, name } => {
            out.put_u8(b'O');
            out.put_u64(commit_lsn.0);
            put_name(&mut out, name);
        }
        PgOutputMessage::Relation(relation) => {
            out.put_u8(b'R');
            out.put_u32(relation.id);
            put_name(&mut out, &relation.namespace);
            put_name(&mut out, &relation.name);
            out.put_u8(match relation.replica_identity {
                ReplicaIdentity::Default => b'd',
                ReplicaIdentity::Nothing => b'n',
                ReplicaIdentity::Full => b'f',
                ReplicaIdentity::Index => b'i',
            });
            out.put_u16(u16::try_from(relation.columns.len()).expect("a few columns"));
            for column in &relation.columns {
                out.put_u8(u8::from(column.is_key));
                put_name(&mut out, &column.name);
                out.put_u32(column.type_oid);
                out.put_i32(column.type_modifier);
            }
        }
        PgOutputMessage::Type {
            id,
            namespace,
            name,
        } => {
            out.put_u8(b'Y');
            out.put_u32(*id);
            put_name(&mut out, namespace);
            put_name(&mut out, name);
        }
        PgOutputMessage::Insert { relation_id, new } => {
            out.put_u8(b'I');
            out.put_u32(*relation_id);
            out.put_u8(b'N');
            put_tuple(&mut out, new);
        }
        PgOutputMessage::Update {
            relation_id,
            old,
            key,
            new,
        } => {
            out.put_u8(b'U');
            out.put_u32(*relation_id);
            if let Some(key) = key {
                out.put_u8(b'K');
                put_tuple(&mut out, key);
            }
            if let Some(old) = old {
                out.put_u8(b'O');
                put_tuple(&mut out, old);
            }
            out.put_u8(b'N');
            put_tuple(&mut out, new);
        }
        PgOutputMessage::Delete {
            relation_id,
            old,
            key,
        } => {
            out.put_u8(b'D');
            out.put_u32(*relation_id);
            if let Some(key) = key {
                out.put_u8(b'K');
                put_tuple(&mut out, key);
            }
            if let Some(old) = old {
                out.put_u8(b'O');
                put_tuple(&mut out, old);
            }
        }
        PgOutputMessage::Truncate {
            options,
            relation_ids,
        } => {
            out.put_u8(b'T');
            out.put_i32(i32::try_from(relation_ids.len()).expect("a few relations"));
            out.put_u8(*options);
            for id in relation_ids {
                out.put_u32(*id);
            }
        }
        PgOutputMessage::Message {
            transactional,
            lsn,
            prefix,
            content,
        } => {
            out.put_u8(b'M');
            out.put_u8(u8::from(*transactional));
            out.put_u64(lsn.0);
            put_name(&mut out, prefix);
            out.put_i32(i32::try_from(content.len()).expect("a small content"));
            out.put_slice(content);
        }
    }
    out
}

proptest! {
    #![proptest_config(super::config())]

    /// What the server may send decodes to itself.
    #[test]
    fn messages_round_trip(message in message()) {
        let bytes = encode(&message);
        prop_assert_eq!(decode(Bytes::from(bytes)), Ok(message));
    }

    /// A valid message cut short anywhere, or with anything appended, is an error.
    #[test]
    fn cut_or_extended_messages_are_errors(
        message in message(),
        cut in any::<prop::sample::Index>(),
        extra in proptest::collection::vec(any::<u8>(), 1..8),
    ) {
        let bytes = encode(&message);
        let at = cut.index(bytes.len());
        prop_assert!(decode(Bytes::copy_from_slice(&bytes[..at])).is_err());
        let mut longer = bytes;
        longer.extend_from_slice(&extra);
        prop_assert!(decode(Bytes::from(longer)).is_err());
    }

    /// A count or length field forged to its largest value, in front of a short body, is an
    /// error, and what is reserved for it is bounded by the body.
    #[test]
    fn forged_counts_and_lengths_are_errors(
        tag in prop::sample::select(b"RITUDM".to_vec()),
        count in prop_oneof![Just(u16::MAX), any::<u16>()],
        length in prop_oneof![Just(i32::MAX), Just(i32::MIN), Just(-1), any::<i32>()],
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut bytes = vec![tag];
        match tag {
            b'R' => {
                bytes.put_u32(1);
                bytes.put_slice(b"s\0t\0d");
                bytes.put_u16(count);
            }
            b'T' => {
                bytes.put_i32(length);
                bytes.put_u8(0);
            }
            b'M' => {
                bytes.put_u8(1);
                bytes.put_u64(0);
                bytes.put_slice(b"p\0");
                bytes.put_i32(length);
            }
            _ => {
                bytes.put_u32(1);
                bytes.put_u8(b'N');
                bytes.put_u16(count);
                bytes.put_u8(b't');
                bytes.put_i32(length);
            }
        }
        bytes.extend_from_slice(&body);
        // Whatever it decodes to (a short forged field can be valid), it holds no more
        // values than bytes came.
        let size = bytes.len();
        if let Ok(message) = decode(Bytes::from(bytes)) {
            let held = match &message {
                PgOutputMessage::Relation(relation) => relation.columns.len(),
                PgOutputMessage::Insert { new, .. } => new.0.len(),
                PgOutputMessage::Truncate { relation_ids, .. } => relation_ids.len(),
                _ => 0,
            };
            prop_assert!(held <= size);
        }
    }
}

/// The largest forged counts and lengths in front of nothing: each an error at once (the
/// reservation a count may make is capped by the bytes left, see `decode_tuple`).
#[test]
fn largest_forged_counts_are_errors() {
    let mut insert = vec![b'I', 0, 0, 0, 1, b'N'];
    insert.put_u16(u16::MAX);
    assert!(decode(Bytes::from(insert)).is_err());
    let mut truncate = vec![b'T'];
    truncate.put_i32(i32::MAX);
    truncate.put_u8(0);
    assert!(decode(Bytes::from(truncate)).is_err());
    let mut message = vec![b'M', 1];
    message.put_u64(0);
    message.put_slice(b"p\0");
    message.put_i32(i32::MAX);
    assert!(decode(Bytes::from(message)).is_err());
}
