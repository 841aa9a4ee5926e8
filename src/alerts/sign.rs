//! The signature of a message, as GitHub signs its webhooks: HMAC-SHA256 over the body with
//! the receiver's secret, sent as `X-Novad-Signature-256: sha256=<hex>`. A receiver computes
//! the same over the bytes it got and compares in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The signature header's name.
pub const HEADER: &str = "X-Novad-Signature-256";

/// The header's value for `body` signed with `secret`: `sha256=` and 64 lowercase hex digits.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

/// Whether `header` is the signature of `body` under `secret` (constant-time comparison).
pub fn verify(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex) = header.strip_prefix("sha256=") else {
        return false;
    };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    let tag: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    mac.verify_slice(&tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
    #[test]
    fn matches_the_rfc_4231_vector() {
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    /// A signature verifies for its body and secret only.
    #[test]
    fn verifies_its_own_body_and_secret_only() {
        let s = signature(b"secret-secret-16", b"{\"a\":1}");
        assert!(verify(b"secret-secret-16", b"{\"a\":1}", &s));
        assert!(!verify(b"secret-secret-17", b"{\"a\":1}", &s));
        assert!(!verify(b"secret-secret-16", b"{\"a\":2}", &s));
        assert!(!verify(b"secret-secret-16", b"{\"a\":1}", &s[..20]));
        assert!(!verify(b"secret-secret-16", b"{\"a\":1}", "md5=00"));
    }
}
