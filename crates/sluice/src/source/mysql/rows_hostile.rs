//! Hostile row images for [`super::decode`]: a rows event's row data read with a plan made of
//! any column types and type metadata a TABLE_MAP can carry. Part of [`crate::hostile`].
//!
//! Properties: a value or an error, never a panic, never a loop; each row consumes bytes, so
//! the rows decoded are at most the bytes that came.

use mysql_async::consts::ColumnType;
use proptest::prelude::*;

use super::*;

/// `crate::hostile::config()`'s settings (not imported: the data path does not depend on the
/// test-only module, see tests/structure.rs): `PROPTEST_CASES` cases, no regression files.
fn config() -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        failure_persistence: None,
        max_shrink_iters: 10_000,
        ..proptest::test_runner::Config::default()
    }
}

/// The column types a TABLE_MAP may name (TYPED_ARRAY aside: replication of multi-valued
/// indexes only, never in a row image).
const TYPES: &[ColumnType] = &[
    ColumnType::MYSQL_TYPE_DECIMAL,
    ColumnType::MYSQL_TYPE_TINY,
    ColumnType::MYSQL_TYPE_SHORT,
    ColumnType::MYSQL_TYPE_LONG,
    ColumnType::MYSQL_TYPE_FLOAT,
    ColumnType::MYSQL_TYPE_DOUBLE,
    ColumnType::MYSQL_TYPE_NULL,
    ColumnType::MYSQL_TYPE_TIMESTAMP,
    ColumnType::MYSQL_TYPE_LONGLONG,
    ColumnType::MYSQL_TYPE_INT24,
    ColumnType::MYSQL_TYPE_DATE,
    ColumnType::MYSQL_TYPE_TIME,
    ColumnType::MYSQL_TYPE_DATETIME,
    ColumnType::MYSQL_TYPE_YEAR,
    ColumnType::MYSQL_TYPE_NEWDATE,
    ColumnType::MYSQL_TYPE_VARCHAR,
    ColumnType::MYSQL_TYPE_BIT,
    ColumnType::MYSQL_TYPE_TIMESTAMP2,
    ColumnType::MYSQL_TYPE_DATETIME2,
    ColumnType::MYSQL_TYPE_TIME2,
    ColumnType::MYSQL_TYPE_VECTOR,
    ColumnType::MYSQL_TYPE_JSON,
    ColumnType::MYSQL_TYPE_NEWDECIMAL,
    ColumnType::MYSQL_TYPE_ENUM,
    ColumnType::MYSQL_TYPE_SET,
    ColumnType::MYSQL_TYPE_TINY_BLOB,
    ColumnType::MYSQL_TYPE_MEDIUM_BLOB,
    ColumnType::MYSQL_TYPE_LONG_BLOB,
    ColumnType::MYSQL_TYPE_BLOB,
    ColumnType::MYSQL_TYPE_VAR_STRING,
    ColumnType::MYSQL_TYPE_STRING,
    ColumnType::MYSQL_TYPE_GEOMETRY,
];

/// The length of a type's metadata in a TABLE_MAP (as `mysql_common` reads it).
fn meta_len(column_type: ColumnType) -> usize {
    use ColumnType::*;
    match column_type {
        MYSQL_TYPE_TINY_BLOB
        | MYSQL_TYPE_BLOB
        | MYSQL_TYPE_MEDIUM_BLOB
        | MYSQL_TYPE_LONG_BLOB
        | MYSQL_TYPE_DOUBLE
        | MYSQL_TYPE_FLOAT
        | MYSQL_TYPE_GEOMETRY
        | MYSQL_TYPE_TIME2
        | MYSQL_TYPE_DATETIME2
        | MYSQL_TYPE_TIMESTAMP2
        | MYSQL_TYPE_JSON
        | MYSQL_TYPE_VECTOR => 1,
        MYSQL_TYPE_VARCHAR
        | MYSQL_TYPE_NEWDECIMAL
        | MYSQL_TYPE_SET
        | MYSQL_TYPE_ENUM
        | MYSQL_TYPE_STRING
        | MYSQL_TYPE_BIT => 2,
        _ => 0,
    }
}

fn column() -> impl Strategy<Value = ColumnPlan> {
    (prop::sample::select(TYPES), any::<[u8; 2]>(), any::<bool>()).prop_map(
        |(column_type, meta, unsigned)| ColumnPlan {
            column_type,
            meta: meta[..meta_len(column_type)].to_vec(),
            unsigned,
        },
    )
}

fn plan() -> impl Strategy<Value = RowPlan> {
    proptest::collection::vec(column(), 0..6).prop_map(|columns| RowPlan { columns })
}

/// Row data: random bytes, or values of plausible sizes (length prefixes, small integers).
fn row_data() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..96),
        proptest::collection::vec(
            prop_oneof![Just(0u8), Just(1), Just(0xff), any::<u8>()],
            0..96
        ),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn row_images_never_panic_or_loop(
        plan in plan(),
        images in 1..4u8,
        data in row_data(),
    ) {
        // The stream refuses a TABLE_MAP with a column the reader cannot read (see
        // `readable`); every other plan is read.
        if !plan.columns.iter().all(|c| readable(c.column_type, &c.meta)) {
            return Ok(());
        }
        let (before, after) = (images & 1 != 0, images & 2 != 0);
        if let Ok(rows) = decode_images(&plan, before, after, &data) {
            prop_assert!(rows.len() <= data.len());
        }
    }
}

/// Found by `row_images_never_panic_or_loop`: a TABLE_MAP of no columns made every image
/// consume nothing, so row data that was not empty decoded rows forever (memory without
/// bound). Now an error.
#[test]
fn a_table_of_no_columns_with_row_data_is_an_error() {
    let plan = RowPlan {
        columns: Vec::new(),
    };
    assert!(decode_images(&plan, false, true, &[0]).is_err());
    assert!(decode_images(&plan, true, true, &[0, 0]).is_err());
    assert_eq!(
        decode_images(&plan, false, true, &[]).map(|r| r.len()).ok(),
        Some(0)
    );
}

/// Found by `row_images_never_panic_or_loop`: `mysql_common` panicked (an index out of
/// bounds) on a DECIMAL of precision 0 and scale 1, and on a VAR_STRING column (its TABLE_MAP
/// metadata is empty; the reader indexes two bytes). Such metadata is now refused with the
/// TABLE_MAP (`unreadable_column`, a fatal error naming the table), before any row is read.
#[test]
fn column_metadata_the_reader_would_panic_on_is_refused() {
    assert!(!readable(ColumnType::MYSQL_TYPE_NEWDECIMAL, &[0, 1]));
    assert!(!readable(ColumnType::MYSQL_TYPE_NEWDECIMAL, &[10, 11]));
    assert!(!readable(ColumnType::MYSQL_TYPE_NEWDECIMAL, &[66, 0]));
    assert!(!readable(ColumnType::MYSQL_TYPE_VAR_STRING, &[]));
    assert!(!readable(ColumnType::MYSQL_TYPE_TIME2, &[7]));
    assert!(readable(ColumnType::MYSQL_TYPE_NEWDECIMAL, &[10, 2]));
    assert!(readable(ColumnType::MYSQL_TYPE_VARCHAR, &[255, 0]));
    assert!(readable(ColumnType::MYSQL_TYPE_DATETIME2, &[6]));
}

/// Found by `row_images_never_panic_or_loop` (20,000 cases): `mysql_common`'s readers do
/// unchecked arithmetic on malformed values: a TIME2(1) of bytes 00 00 00 01 subtracted with
/// overflow (`binlog/misc.rs`), a DECIMAL's last digit group multiplied with overflow
/// (`binlog/decimal/mod.rs`, seen in the 256-case run); a panic with overflow checks on (this
/// build), a wrong value without. A panic in the crate's reader is now the value's error.
#[test]
fn malformed_values_the_reader_overflows_on_are_errors() {
    let plan = |column_type, meta: &[u8]| RowPlan {
        columns: vec![ColumnPlan {
            column_type,
            meta: meta.to_vec(),
            unsigned: false,
        }],
    };
    let time = plan(ColumnType::MYSQL_TYPE_TIME2, &[1]);
    let decimal = plan(ColumnType::MYSQL_TYPE_NEWDECIMAL, &[1, 0]);
    if cfg!(debug_assertions) {
        assert!(decode_images(&time, false, true, &[44, 0, 0, 0, 1]).is_err());
    }
    // Well-formed ones read.
    assert!(decode_images(&decimal, false, true, &[0, 0x87]).is_ok());
    assert!(decode_images(&time, false, true, &[0, 0x80, 0, 0, 0]).is_ok());
}
