//! Debezium's geometry values (`io.debezium.data.geometry.Point`, `…Geometry`): OGC
//! well-known binary (little-endian, no SRID) in base64, shared by every source.

use base64::Engine as _;

/// WKB byte-order mark: little-endian (NDR).
const LITTLE_ENDIAN: u8 = 1;
/// WKB geometry type of a point.
const WKB_POINT: u32 = 1;
/// WKB geometry type of a polygon.
const WKB_POLYGON: u32 = 3;

/// The WKB of a point.
pub fn point_wkb(x: f64, y: f64) -> Vec<u8> {
    let mut wkb = Vec::with_capacity(21);
    wkb.push(LITTLE_ENDIAN);
    wkb.extend_from_slice(&WKB_POINT.to_le_bytes());
    wkb.extend_from_slice(&x.to_le_bytes());
    wkb.extend_from_slice(&y.to_le_bytes());
    wkb
}

/// The WKB of a polygon of one ring (its points in order, the first repeated last by the
/// caller as WKB wants).
pub fn polygon_wkb(ring: &[(f64, f64)]) -> Vec<u8> {
    let mut wkb = Vec::with_capacity(13 + 16 * ring.len());
    wkb.push(LITTLE_ENDIAN);
    wkb.extend_from_slice(&WKB_POLYGON.to_le_bytes());
    wkb.extend_from_slice(&1u32.to_le_bytes());
    wkb.extend_from_slice(&u32::try_from(ring.len()).unwrap_or(u32::MAX).to_le_bytes());
    for (x, y) in ring {
        wkb.extend_from_slice(&x.to_le_bytes());
        wkb.extend_from_slice(&y.to_le_bytes());
    }
    wkb
}

/// A box (two opposite corners `(x1,y1)`, `(x2,y2)`) as Debezium's polygon: the ring
/// `(x1,y1) (x1,y2) (x2,y2) (x2,y1) (x1,y1)`.
pub fn box_wkb(x1: f64, y1: f64, x2: f64, y2: f64) -> Vec<u8> {
    polygon_wkb(&[(x1, y1), (x1, y2), (x2, y2), (x2, y1), (x1, y1)])
}

/// Appends `wkb` as a base64 JSON string.
pub fn write_wkb(wkb: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(wkb)
            .as_bytes(),
    );
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(wkb: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(wkb)
    }

    #[test]
    fn point_and_box_are_debeziums_wkb() {
        // From the golden files (tests/debezium/defaults, public.others).
        assert_eq!(b64(&point_wkb(1.5, 2.5)), "AQEAAAAAAAAAAAD4PwAAAAAAAARA");
        assert_eq!(b64(&point_wkb(-0.0, 1e300)), "AQEAAAAAAAAAAAAAgJx1AIg85Dd+");
        assert_eq!(
            b64(&box_wkb(1.0, 1.0, 0.0, 0.0)),
            "AQMAAAABAAAABQAAAAAAAAAAAPA/AAAAAAAA8D8AAAAAAADwPwAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\
             AAAAAAAAAAAAAAAA8D8AAAAAAADwPwAAAAAAAPA/"
        );
    }
}
