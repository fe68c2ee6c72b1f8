//! Lease names for the member protocol: `<prefix>-<cluster>-leader` and
//! `<prefix>-<cluster>-targets-<key>`. A target key that would not make a valid Lease name
//! (upper case, `/`, `_`, non-ASCII, too long, …) gets a stable hashed name instead; the raw key
//! always travels in an annotation, so the mapping never has to be reversed. Pure functions only.

use ring::digest;

/// The longest Kubernetes object name (a DNS-1123 subdomain).
pub const MAX_NAME: usize = 253;
/// Hex digits of SHA-256 kept in a hashed name: 128 bits, collision-free in practice and short
/// enough to leave room for long prefixes and cluster names.
const HASH_HEX: usize = 32;

/// The leader Lease of a cluster.
pub fn leader_lease(prefix: &str, cluster: &str) -> String {
    format!("{prefix}-{cluster}-leader")
}

/// The common beginning of every target Lease name of a cluster.
pub fn target_lease_stem(prefix: &str, cluster: &str) -> String {
    format!("{prefix}-{cluster}-targets-")
}

/// The Lease name of target `key`. Keys that are valid DNS-1123 subdomains (and keep the name
/// within 253 characters) are used as they are, so `kubectl get leases` reads naturally; any
/// other key becomes `<stem>-<sha256 hex>`. The double dash cannot come from a literal key
/// (which must start with a letter or digit), so a hashed name never collides with a plain one.
pub fn target_lease(prefix: &str, cluster: &str, key: &str) -> String {
    let stem = target_lease_stem(prefix, cluster);
    if is_dns_subdomain(key) && stem.len() + key.len() <= MAX_NAME {
        return format!("{stem}{key}");
    }
    let d = digest::digest(&digest::SHA256, key.as_bytes());
    let mut name = stem;
    name.push('-');
    for b in &d.as_ref()[..HASH_HEX / 2] {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

/// Whether `s` is a DNS-1123 label: 1–63 of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is a DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_NAME && s.split('.').all(is_dns_label)
}

/// Whether `s` is a valid label key: a name (1–63 of `[A-Za-z0-9._-]`, starting and ending
/// alphanumeric), optionally behind a DNS-subdomain prefix and `/` (`leasehold.io/cluster`).
pub fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    prefix.is_none_or(|p| !p.is_empty() && is_dns_subdomain(p))
        && !name.is_empty()
        && is_label_value(name)
}

/// Whether `s` is a valid label value (empty, or ≤ 63 of `[A-Za-z0-9._-]` starting and ending
/// alphanumeric).
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric())
}

/// gnmic's Lease name for a locker key (`pkg/lockers/k8s_locker`): every `/` becomes `-`, and
/// a result that is not a valid name becomes `gnmic-<full sha256 hex of the key>`.
pub fn gnmic_lease(key: &str) -> String {
    let legacy = key.replace('/', "-");
    if is_dns_subdomain(&legacy) && legacy.len() <= 63 {
        return legacy;
    }
    let d = digest::digest(&digest::SHA256, key.as_bytes());
    let mut name = String::from("gnmic-");
    for b in d.as_ref() {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_keys_stay_readable() {
        assert_eq!(
            target_lease("leasehold", "collector", "device-00001"),
            "leasehold-collector-targets-device-00001"
        );
        assert_eq!(
            target_lease("leasehold", "c", "10.0.0.1"),
            "leasehold-c-targets-10.0.0.1"
        );
        assert_eq!(leader_lease("leasehold", "c"), "leasehold-c-leader");
    }

    #[test]
    fn awkward_keys_get_stable_hashed_names() {
        for key in [
            "Router-1",
            "spine/1",
            "leaf_2",
            "café",
            "",
            "-x",
            "a..b",
            &"x".repeat(300),
        ] {
            let name = target_lease("leasehold", "c", key);
            assert!(is_dns_subdomain(&name), "{key:?} -> {name}");
            assert!(name.starts_with("leasehold-c-targets--"), "{name}");
            assert_eq!(name, target_lease("leasehold", "c", key), "stable");
        }
        assert_ne!(
            target_lease("leasehold", "c", "A"),
            target_lease("leasehold", "c", "a")
        );
        // A key just too long for the name is hashed; one that fits is not.
        let stem = target_lease_stem("leasehold", "c");
        let dotted = |len: usize| -> String {
            (0..len)
                .map(|i| {
                    if i % 50 == 49 && i + 1 < len {
                        '.'
                    } else {
                        'a'
                    }
                })
                .collect()
        };
        let fits = dotted(MAX_NAME - stem.len());
        assert_eq!(
            target_lease("leasehold", "c", &fits),
            format!("{stem}{fits}")
        );
        let too_long = dotted(MAX_NAME - stem.len() + 1);
        assert!(target_lease("leasehold", "c", &too_long).contains("--"));
    }

    #[test]
    fn gnmic_names_match_the_locker() {
        assert_eq!(
            gnmic_lease("gnmic/lab/targets/router-1"),
            "gnmic-lab-targets-router-1"
        );
        assert_eq!(gnmic_lease("gnmic/lab/leader"), "gnmic-lab-leader");
        let hashed = gnmic_lease("gnmic/lab/targets/Router_1");
        assert!(
            hashed.starts_with("gnmic-") && hashed.len() == 6 + 64,
            "{hashed}"
        );
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("collector-0"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
