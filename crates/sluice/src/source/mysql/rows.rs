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

/// The images of every row in `rows`, read with `plan` (which must [`RowPlan::fits`] them).
///
/// # Errors
///
/// A row that ends early or holds a value its column's type cannot have.
pub fn decode<'a>(plan: &'a RowPlan, rows: &'a RowsEventData<'a>) -> io::Result<Vec<Images>> {
    let before = rows.columns_before_image().is_some();
    let after = rows.columns_after_image().is_some();
    let mut buf = ParseBuf(rows.rows_data());
    let mut out = Vec::new();
    while !buf.is_empty() {
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
            values.push(buf.parse::<BinlogValue<'_>>(ctx)?.into_owned());
        }
    }
    Ok(values)
}
