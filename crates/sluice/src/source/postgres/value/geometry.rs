//! `point` and `box` as Debezium's geometry structs (WKB in base64).

use super::kind::{Kind, ValueError};
use super::numeric::write_float;

/// A point's coordinates: each as its text and its value.
pub(super) type Coordinates<'a> = (&'a [u8], &'a [u8], f64, f64);

/// Parses `(x,y)` into its two coordinates, checked as floats.
pub(super) fn parse_point(text: &[u8], kind: Kind) -> Result<Coordinates<'_>, ValueError> {
    let inner = text
        .strip_prefix(b"(")
        .and_then(|t| t.strip_suffix(b")"))
        .ok_or(kind.invalid())?;
    let comma = inner
        .iter()
        .position(|b| *b == b',')
        .ok_or(kind.invalid())?;
    let (x, y) = (&inner[..comma], &inner[comma + 1..]);
    let parse = |t: &[u8]| {
        std::str::from_utf8(t)
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
            .ok_or(kind.invalid())
    };
    Ok((x, y, parse(x)?, parse(y)?))
}

/// Appends a `point` as Debezium's `io.debezium.data.geometry.Point`.
pub(super) fn write_point(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let (x_text, y_text, x, y) = parse_point(text, Kind::Point)?;
    out.extend_from_slice(b"{\"x\":");
    write_float(x_text, false, out)?;
    out.extend_from_slice(b",\"y\":");
    write_float(y_text, false, out)?;
    out.extend_from_slice(b",\"wkb\":");
    crate::event::geometry::write_wkb(&crate::event::geometry::point_wkb(x, y), out);
    out.extend_from_slice(b",\"srid\":null}");
    Ok(())
}

/// Appends a `box` (`(x1,y1),(x2,y2)`) as Debezium's `io.debezium.data.geometry.Geometry`: a
/// polygon's WKB, no SRID, `"extensions":{"type":"box"}`.
pub(super) fn write_box(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let split = text
        .windows(3)
        .position(|w| w == b"),(")
        .ok_or(Kind::Box.invalid())?;
    let (_, _, x1, y1) = parse_point(&text[..=split], Kind::Box)?;
    let (_, _, x2, y2) = parse_point(&text[split + 2..], Kind::Box)?;
    out.extend_from_slice(b"{\"wkb\":");
    crate::event::geometry::write_wkb(&crate::event::geometry::box_wkb(x1, y1, x2, y2), out);
    out.extend_from_slice(b",\"srid\":null,\"extensions\":{\"type\":\"box\"}}");
    Ok(())
}
