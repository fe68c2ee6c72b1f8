//! Name validation and generation exactly as kube-apiserver words it
//! (`k8s.io/apimachinery/pkg/util/validation`, `apimachinery/pkg/api/validation/path`).

use rand::Rng;

/// `generateName` suffix alphabet (`k8s.io/apimachinery/pkg/util/rand`): no vowels, no
/// look-alike digits, so generated names never spell words.
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// Length of the random `generateName` suffix.
const SUFFIX_LEN: usize = 5;
/// Generated names are cut so prefix + suffix fit a DNS subdomain label of 63.
const MAX_GENERATED_NAME_LENGTH: usize = 63 - SUFFIX_LEN;

/// `generateName` + 5 random characters.
pub fn generate(prefix: &str) -> String {
    let base: String = prefix.chars().take(MAX_GENERATED_NAME_LENGTH).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..SUFFIX_LEN)
        .map(|_| ALPHANUMS[rng.random_range(0..ALPHANUMS.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

fn is_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn label_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum(c) || c == b'-')
}

/// RFC 1123 subdomain errors (empty = valid).
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if !s.split('.').all(label_ok) {
        errs.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned());
    }
    errs
}

/// RFC 1123 label errors (empty = valid).
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !label_ok(s) && dns1123_subdomain(s).is_empty() {
        // A valid subdomain that is no label: apimachinery's IsDNS1123Label says why.
        errs.push("must not contain dots".to_owned());
    } else if !label_ok(s) {
        errs.push("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_owned());
    }
    errs
}

/// RFC 1035 label errors (empty = valid): services.
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !(label_ok(s) && s.as_bytes()[0].is_ascii_lowercase()) {
        errs.push("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')".to_owned());
    }
    errs
}

/// Path-segment name errors: the minimum every object name must meet.
pub fn path_segment(s: &str) -> Vec<String> {
    if s == "." || s == ".." {
        return vec![format!("may not be '{s}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| s.contains(*bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// Label key errors (`prefix/name`), as `validation.IsQualifiedName`.
pub fn qualified_name(key: &str) -> Vec<String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let mut errs = Vec::new();
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".to_owned());
        } else {
            errs.extend(
                dns1123_subdomain(p)
                    .into_iter()
                    .map(|e| format!("prefix part {e}")),
            );
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else {
        if name.len() > 63 {
            errs.push("name part must be no more than 63 characters".to_owned());
        }
        let b = name.as_bytes();
        let alnum = |c: u8| c.is_ascii_alphanumeric();
        if !(alnum(b[0])
            && alnum(b[b.len() - 1])
            && b.iter()
                .all(|&c| alnum(c) || c == b'-' || c == b'_' || c == b'.'))
        {
            errs.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_owned());
        }
    }
    errs
}

/// Label value errors, as `validation.IsValidLabelValue`.
pub fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    let b = v.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    let valid = b.is_empty()
        || (alnum(b[0])
            && alnum(b[b.len() - 1])
            && b.iter()
                .all(|&c| alnum(c) || c == b'-' || c == b'_' || c == b'.'));
    if !valid {
        errs.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned());
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_use_the_apiserver_alphabet() {
        for _ in 0..100 {
            let n = generate("web-");
            assert_eq!(n.len(), 9);
            assert!(n.starts_with("web-"));
            assert!(n[4..].bytes().all(|c| ALPHANUMS.contains(&c)), "{n}");
        }
        assert_eq!(generate(&"x".repeat(100)).len(), 63);
    }

    #[test]
    fn subdomains_and_labels() {
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
        assert_eq!(dns1123_subdomain("Bad_Name").len(), 1);
        assert_eq!(dns1123_subdomain(&"a".repeat(254)).len(), 1);
        assert!(dns1123_label("ns-1").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert!(dns1035_label("svc-1").is_empty());
        assert!(!dns1035_label("1svc").is_empty());
        assert_eq!(path_segment("a/b"), ["may not contain '/'"]);
    }

    #[test]
    fn label_keys_and_values() {
        assert!(qualified_name("app.kubernetes.io/name").is_empty());
        assert!(!qualified_name("/x").is_empty());
        assert!(!qualified_name("a b").is_empty());
        assert!(label_value("").is_empty());
        assert!(label_value("My_value.1").is_empty());
        assert!(!label_value("-x").is_empty());
    }
}
