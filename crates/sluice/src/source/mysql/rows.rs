//! Row images of a rows event, decoded with a plan made once per TABLE_MAP.
//!
//! `mysql_common`'s row iterator (`RowsEvent::rows`) is exact but rebuilds, for every row,
//! what only changes with the TABLE_MAP: it parses the map's optional metadata again, looks up
//! each column's type metadata from the first column on (quadratic in the column count) and
//! allocates a `Column` (schema, table and column names, copied) for every column of every
//! row. On a backlog that was a fifth of sluice's CPU (bench/PROFILE.md, "MySQL"). A
//! [`RowPlan`] keeps each column's type, type metadata and signedness; [`decode`] reads the
//! images with it, each value still decoded by `mysql_common`'s own `BinlogValue` reader, so
//! the values are those of the crate's iterator (the Debezium comparison, `debezium_mysql::`,
//! streams every mapped type through both: a table's first rows go through the crate's).
//!
//! The plan covers full images only (`binlog_row_image = FULL`, which the source requires):
//! an event whose images leave columns out, or a partial JSON update, is decoded by the
//! crate's iterator instead ([`RowPlan::fits`]).

use std::io;

use mysql_async::binlog::events::{RowsEventData, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_common::io::ParseBuf;

/// One row change's images: before (updates, deletes) and after (inserts, updates).
pub type Images = (
    Option<Vec<BinlogValue<'static>>>,
    Option<Vec<BinlogValue<'static>>>,
);

/// How to read one column's value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ColumnPlan {
    column_type: ColumnType,
    /// The type metadata from the TABLE_MAP (length, precision, …).
    meta: Vec<u8>,
    unsigned: bool,
}

/// How to read the rows of one TABLE_MAP's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPlan {
    columns: Vec<ColumnPlan>,
}

impl RowPlan {
    /// The plan of `tme`'s table, with each column's signedness from the columns the crate
    /// decoded for its first row (`columns`, which it read from the map's optional metadata).
    /// `None` when the row did not have every column (an image that is not FULL).
    pub fn new(tme: &TableMapEvent<'_>, columns: &[mysql_async::Column]) -> Option<Self> {
        let count = usize::try_from(tme.columns_count()).ok()?;
        if columns.len() != count {
            return None;
        }
        let columns = columns
            .iter()
            .enumerate()
            .map(|(i, column)| {
                Some(ColumnPlan {
                    column_type: tme.get_column_type(i).ok()??,
                    meta: tme.get_column_metadata(i)?.to_vec(),
                    unsigned: column.flags().contains(ColumnFlags::UNSIGNED_FLAG),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self { columns })
    }

    /// Whether [`decode`] reads `rows`: every image holds every column, and it is not a
    /// partial JSON update.
    pub fn fits(&self, rows: &RowsEventData<'_>) -> bool {
        let count = self.columns.len();
        !matches!(rows, RowsEventData::PartialUpdateRowsEvent(_))
            && usize::try_from(rows.num_columns()).ok() == Some(count)
            && rows
                .columns_before_image()
                .is_none_or(|bits| bits.len() == count && bits.all())
            && rows
                .columns_after_image()
                .is_none_or(|bits| bits.len() == count && bits.all())
    }
}

/// Whether `mysql_common`'s value reader can read a column of `column_type` with `meta` (its
/// TABLE_MAP metadata) without panicking: it indexes the metadata and sizes decimals by it
/// unchecked, and a hostile or broken server can send any. Every MySQL and MariaDB server
/// writes metadata that passes.
pub fn readable(column_type: ColumnType, meta: &[u8]) -> bool {
    use ColumnType::*;
    match column_type {
        // The reader takes two metadata bytes for these (VAR_STRING has none in a TABLE_MAP).
        MYSQL_TYPE_VARCHAR
        | MYSQL_TYPE_VAR_STRING
        | MYSQL_TYPE_STRING
        | MYSQL_TYPE_ENUM
        | MYSQL_TYPE_SET
        | MYSQL_TYPE_BIT => meta.len() >= 2,
        // Precision 1-65 digits, scale 0-30 and at most the precision (DECIMAL(M,D)).
        MYSQL_TYPE_NEWDECIMAL => match meta {
            [precision, scale, ..] => {
                (1..=65).contains(precision) && *scale <= 30 && scale <= precision
            }
            _ => false,
        },
        // Fractional seconds: 0-6 digits.
        MYSQL_TYPE_TIME2 | MYSQL_TYPE_DATETIME2 | MYSQL_TYPE_TIMESTAMP2 => {
            meta.first().is_some_and(|fsp| *fsp <= 6)
        }
        MYSQL_TYPE_TINY_BLOB
        | MYSQL_TYPE_BLOB
        | MYSQL_TYPE_MEDIUM_BLOB
        | MYSQL_TYPE_LONG_BLOB
        | MYSQL_TYPE_GEOMETRY
        | MYSQL_TYPE_JSON
        | MYSQL_TYPE_FLOAT
        | MYSQL_TYPE_DOUBLE
        | MYSQL_TYPE_VECTOR => !meta.is_empty(),
        // The element type's metadata: never in a row image sluice reads.
        MYSQL_TYPE_TYPED_ARRAY => false,
        _ => true,
    }
}

/// The first column of `tme` whose type and metadata [`readable`] refuses (its index), or
/// whose type the map does not say.
pub fn unreadable_column(tme: &TableMapEvent<'_>) -> Option<usize> {
    let count = usize::try_from(tme.columns_count()).ok()?;
    (0..count).find(|&i| {
        match (
            tme.get_column_type(i).ok().flatten(),
            tme.get_column_metadata(i),
        ) {
            (Some(column_type), Some(meta)) => !readable(column_type, meta),
            _ => true,
        }
    })
}

/// The images of every row in `rows`, read with `plan` (which must [`RowPlan::fits`] them).
///
/// # Errors
///
/// A row that ends early or holds a value its column's type cannot have.
pub fn decode<'a>(plan: &'a RowPlan, rows: &'a RowsEventData<'a>) -> io::Result<Vec<Images>> {
    decode_images(
        plan,
        rows.columns_before_image().is_some(),
        rows.columns_after_image().is_some(),
        rows.rows_data(),
    )
}

/// The images in a rows event's row data: each row a before image (`before`), then an after
/// image (`after`).
fn decode_images(
    plan: &RowPlan,
    before: bool,
    after: bool,
    data: &[u8],
) -> io::Result<Vec<Images>> {
    let mut buf = ParseBuf(data);
    let mut out = Vec::new();
    while !buf.is_empty() {
        let left = buf.len();
        let old = if before {
            Some(image(plan, &mut buf)?)
        } else {
            None
        };
        let new = if after {
            Some(image(plan, &mut buf)?)
        } else {
            None
        };
        // A row reads at least its null bitmap, unless the table map has no columns (a
        // hostile or broken server): then it would never end.
        if buf.len() == left {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a row image of no bytes (the table map has no columns)",
            ));
        }
        out.push((old, new));
    }
    Ok(out)
}

/// One image: the null bitmap, then each non-null column's value.
fn image<'a>(plan: &'a RowPlan, buf: &mut ParseBuf<'a>) -> io::Result<Vec<BinlogValue<'static>>> {
    let count = plan.columns.len();
    let nulls: &[u8] = buf
        .checked_eat(count.div_ceil(8))
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "row image ends early"))?;
    let mut values = Vec::with_capacity(count);
    for (i, column) in plan.columns.iter().enumerate() {
        if nulls[i / 8] & (1 << (i % 8)) != 0 {
            values.push(BinlogValue::Value(mysql_async::Value::NULL));
        } else {
            let ctx = (
                column.column_type,
                column.meta.as_slice(),
                column.unsigned,
                false,
            );
            // The crate's reader does unchecked arithmetic on some malformed values (a
            // DECIMAL's last digits, a TIME2's fraction): an overflow panic where overflow
            // checks are on (debug and test builds), a wrong value where not. A panic there is
            // this value's error, not the process's end.
            let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                buf.parse::<BinlogValue<'_>>(ctx)
            }))
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a malformed {:?} value", column.column_type),
                )
            })??;
            values.push(value.into_owned());
        }
    }
    Ok(values)
}

/// Hostile row images, tried systematically (see [`crate::hostile`]).
#[cfg(test)]
#[path = "rows_hostile.rs"]
mod hostile;
