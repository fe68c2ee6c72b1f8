//! Lease names for the member protocol: `<prefix>-<cluster>-leader`,
//! `<prefix>-<cluster>-targets-<key>`, `<prefix>-<cluster>-member-<identity>`, a
//! control-plane replica's watch probe `<control-plane lease>-probe-<identity>`, and the label value that stands for an identity. A target key that would not make a valid Lease name
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

/// Hex digits of SHA-256 in a hashed label value (`h-` + 20 digits: 80 bits).
const LABEL_HASH_HEX: usize = 20;

/// The member Lease of `identity`: `<prefix>-<cluster>-member-<identity>` when
/// that is a valid name, else `<prefix>-<cluster>-member--<sha256 hex>` (as for target keys).
pub fn member_lease(prefix: &str, cluster: &str, identity: &str) -> String {
    stem_and(&format!("{prefix}-{cluster}-member-"), identity)
}

/// `stem` + `raw` when that is a valid name, else `stem` + `-` + the first 32 hex digits of
/// `raw`'s SHA-256.
fn stem_and(stem: &str, raw: &str) -> String {
    if is_dns_subdomain(raw) && stem.len() + raw.len() <= MAX_NAME {
        return format!("{stem}{raw}");
    }
    format!("{stem}-{}", hex_digest(raw, HASH_HEX))
}

/// The hand-over plan Lease of member `identity` (`protocol::plan`):
/// `<prefix>-<cluster>-plan-<identity>` when that is a valid name, else
/// `<prefix>-<cluster>-plan--<sha256 hex>`.
pub fn plan_lease(prefix: &str, cluster: &str, identity: &str) -> String {
    stem_and(&format!("{prefix}-{cluster}-plan-"), identity)
}

/// The watch probe Lease of control-plane replica `identity` (`k8s::probe`):
/// `<stem>-probe-<identity>` when that is a valid name, else `<stem>-probe--<sha256 hex>`.
pub fn probe_lease(stem: &str, identity: &str) -> String {
    stem_and(&format!("{stem}-probe-"), identity)
}

/// The label value standing for member `identity` (the `leasehold.io/desired-owner` and
/// `leasehold.io/holder` labels): the identity itself when it is a valid label
/// value, else `h-` and the first 20 hex digits of its SHA-256 — which no pod name can be
/// confused with, since a valid label value is used as it is.
pub fn identity_label(identity: &str) -> String {
    if !identity.is_empty() && is_label_value(identity) && !identity.starts_with("h-") {
        return identity.to_owned();
    }
    format!("h-{}", hex_digest(identity, LABEL_HASH_HEX))
}

fn hex_digest(s: &str, digits: usize) -> String {
    let d = digest::digest(&digest::SHA256, s.as_bytes());
    d.as_ref()[..digits / 2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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
    stem_and(&target_lease_stem(prefix, cluster), key)
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

/// gnmic's Lease name for a locker key (`pkg/lockers/k8s_locker`, v0.47.0): every `/` becomes
/// `-`. gnmic does not hash: `None` when that is not a valid object name — gnmic's create fails,
/// and the key never gets a Lease.
pub fn gnmic_lease(key: &str) -> Option<String> {
    let name = key.replace('/', "-");
    is_dns_subdomain(&name).then_some(name)
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
    fn member_leases_and_identity_labels() {
        assert_eq!(
            member_lease("leasehold", "c", "collector-0"),
            "leasehold-c-member-collector-0"
        );
        let hashed = member_lease("leasehold", "c", "Collector_0");
        assert!(hashed.starts_with("leasehold-c-member--") && is_dns_subdomain(&hashed));
        assert_eq!(
            probe_lease("leasehold-control-plane", "leasehold-0"),
            "leasehold-control-plane-probe-leasehold-0"
        );
        let hashed = probe_lease("leasehold-control-plane", "host:1234");
        assert!(hashed.starts_with("leasehold-control-plane-probe--") && is_dns_subdomain(&hashed));
        assert_eq!(identity_label("collector-0"), "collector-0");
        for odd in ["", "a/b", "-x", "h-looks-hashed", &"x".repeat(64)] {
            let l = identity_label(odd);
            assert!(l.starts_with("h-") && l.len() == 22, "{odd:?} -> {l}");
            assert!(is_label_value(&l));
        }
        assert_ne!(identity_label("a/b"), identity_label("a/c"));
    }

    #[test]
    fn gnmic_names_match_the_locker() {
        assert_eq!(
            gnmic_lease("gnmic/lab/targets/router-1").as_deref(),
            Some("gnmic-lab-targets-router-1")
        );
        assert_eq!(
            gnmic_lease("gnmic/lab/leader").as_deref(),
            Some("gnmic-lab-leader")
        );
        // Upper case, `_`, too long: no Lease at all.
        for key in ["gnmic/lab/targets/Router-1", "gnmic/lab/targets/r_1"] {
            assert_eq!(gnmic_lease(key), None, "{key}");
        }
        assert_eq!(
            gnmic_lease(&format!("gnmic/lab/targets/{}", "r".repeat(250))),
            None
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
