//! Primitives for handling secrets: random tokens, SHA-256 digests and constant-time
//! comparison. Nothing here stores, logs or formats a secret.

use ring::digest::{SHA256, digest};
use ring::rand::{SecureRandom, SystemRandom};

use super::AuthError;

/// Bytes of randomness in a session id or CSRF token: 256 bits, as many as an HMAC-SHA256 key,
/// so guessing is out of the question.
pub const RANDOM_TOKEN_BYTES: usize = 32;

/// The SHA-256 of a secret: what is stored and compared instead of the secret itself.
pub type Digest = [u8; 32];

/// The SHA-256 of `secret`.
pub fn sha256(secret: &str) -> Digest {
    let d = digest(&SHA256, secret.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Whether `a == b`, in time that depends only on the lengths.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// [`RANDOM_TOKEN_BYTES`] bytes from the system's CSPRNG, base64url without padding (43
/// characters, safe in cookies, headers and form fields).
pub fn random_token(rng: &SystemRandom) -> Result<String, AuthError> {
    use base64::Engine as _;
    let mut bytes = [0u8; RANDOM_TOKEN_BYTES];
    rng.fill(&mut bytes).map_err(|_| AuthError::Random)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ct_eq_compares() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn random_tokens_are_long_and_distinct() {
        let rng = SystemRandom::new();
        let a = random_token(&rng).unwrap();
        let b = random_token(&rng).unwrap();
        assert_eq!(a.len(), 43);
        assert_ne!(a, b);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
    }

    #[test]
    fn digests_differ() {
        assert_ne!(sha256("a"), sha256("b"));
        assert_eq!(sha256("a"), sha256("a"));
    }
}
