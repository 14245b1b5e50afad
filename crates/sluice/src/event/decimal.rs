//! Kafka Connect's `Decimal` bytes, shared by every source.

use base64::Engine as _;

/// Appends, as a base64 JSON string, the big-endian two's-complement bytes (as few as hold
/// the sign, as Java's `BigInteger.toByteArray`) of the integer `-?digits`.
pub fn write_unscaled(negative: bool, digits: &str, out: &mut Vec<u8>) {
    // Magnitude, big-endian, by multiply-and-add per decimal digit.
    let mut bytes: Vec<u8> = vec![0];
    for digit in digits.bytes() {
        let mut carry = u32::from(digit - b'0');
        for byte in bytes.iter_mut().rev() {
            let v = u32::from(*byte) * 10 + carry;
            *byte = (v & 0xff) as u8;
            carry = v >> 8;
        }
        while carry > 0 {
            bytes.insert(0, (carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    while bytes.len() > 1 && bytes[0] == 0 {
        bytes.remove(0);
    }
    let zero = bytes.iter().all(|b| *b == 0);
    if negative && !zero {
        // Two's complement: invert and add one.
        for byte in &mut bytes {
            *byte = !*byte;
        }
        for byte in bytes.iter_mut().rev() {
            let (v, overflow) = byte.overflowing_add(1);
            *byte = v;
            if !overflow {
                break;
            }
        }
        if bytes[0] & 0x80 == 0 {
            bytes.insert(0, 0xff);
        }
        // Drop redundant sign bytes (0xff followed by a byte with its top bit set).
        while bytes.len() > 1 && bytes[0] == 0xff && bytes[1] & 0x80 != 0 {
            bytes.remove(0);
        }
    } else if bytes[0] & 0x80 != 0 {
        bytes.insert(0, 0);
    }
    out.push(b'"');
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(&bytes)
            .as_bytes(),
    );
    out.push(b'"');
}
