//! Token mode's authenticator: a static token file in kube-apiserver's `--token-auth-file`
//! format, one user per line:
//!
//! ```text
//! # token,user,uid[,"group1,group2"]
//! 31ada4fd-adec-460c-809a-9e56ceb75269,alice,1001,"leasehold:operators,dev"
//! ```
//!
//! Fields are CSV (a field may be quoted; `""` inside quotes is a quote; leading spaces are
//! trimmed, as kube-apiserver's reader does). Blank lines and lines starting with `#` are
//! skipped. Unlike kube-apiserver, a malformed line, a line with more than four fields (several
//! groups must share one quoted field) and a repeated token are errors, not warnings, and a
//! quoted field must close on its own line.
//!
//! It keeps only the SHA-256 of each token and compares digests in constant time, so the
//! table holds no plaintext token and errors never quote one (they give the line number).
//! The file is read once, at start-up.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::secret::{Digest, ct_eq, sha256};
use super::{AuthError, Principal};

/// The group kube-apiserver adds to every authenticated user; added here too, so that
/// `roles.viewer: [system:authenticated]` means "any valid token may read".
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// The users of a token file, by token digest.
pub struct TokenTable {
    entries: Vec<(Digest, Principal)>,
}

impl std::fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenTable")
            .field("users", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl TokenTable {
    /// Reads and parses `file`.
    pub async fn load(file: &Path) -> Result<Self, AuthError> {
        let text =
            tokio::fs::read_to_string(file)
                .await
                .map_err(|source| AuthError::TokenFileRead {
                    file: file.to_owned(),
                    source,
                })?;
        Self::parse(file, &text)
    }

    /// Parses the text of `file` (named in errors).
    pub fn parse(file: &Path, text: &str) -> Result<Self, AuthError> {
        let err = |line: usize, why: String| AuthError::TokenFile {
            file: PathBuf::from(file),
            line,
            why,
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut entries: Vec<(Digest, Principal)> = Vec::new();
        // Parse-time only, so a plain map is fine: no request's timing depends on it.
        let mut first_line: HashMap<Digest, usize> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let number = i + 1;
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let fields = split_record(line).map_err(|why| err(number, why.into()))?;
            let (token, user, uid, group_field) = match fields.as_slice() {
                [token, user, uid] => (token, user, uid, None),
                [token, user, uid, groups] => (token, user, uid, Some(groups)),
                more if more.len() > 4 => {
                    return Err(err(
                        number,
                        format!(
                            "found {} fields; put all groups in one quoted field: token,user,uid,\"group1,group2\"",
                            more.len()
                        ),
                    ));
                }
                fewer => {
                    return Err(err(
                        number,
                        format!(
                            "expected token,user,uid[,\"group1,group2\"] but found {} field(s)",
                            fewer.len()
                        ),
                    ));
                }
            };
            if token.is_empty() {
                return Err(err(number, "the token is empty".into()));
            }
            if user.is_empty() {
                return Err(err(number, "the user name is empty".into()));
            }
            let digest = sha256(token);
            if let Some(first) = first_line.insert(digest, number) {
                return Err(err(
                    number,
                    format!("the token repeats the one on line {first}"),
                ));
            }
            let mut groups: Vec<String> = group_field
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
                groups.push(AUTHENTICATED_GROUP.into());
            }
            let principal = Principal {
                user: user.clone(),
                uid: uid.clone(),
                groups,
            };
            entries.push((digest, principal));
        }
        Ok(Self { entries })
    }

    /// The user holding `token`, if any. Compares against every entry in constant time, so the
    /// time taken says nothing about which entry (if any) matched.
    pub fn authenticate(&self, token: &str) -> Option<Principal> {
        let digest = sha256(token);
        let mut found = None;
        for (d, principal) in &self.entries {
            if ct_eq(d, &digest) && found.is_none() {
                found = Some(principal);
            }
        }
        found.cloned()
    }

    /// How many users the file holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Splits one CSV record (Go `encoding/csv` rules with `TrimLeadingSpace`). The reasons never
/// quote the line, which holds a token.
fn split_record(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        let mut field = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    None => return Err("a quoted field is not closed on its line"),
                    Some('"') if chars.next_if_eq(&'"').is_some() => field.push('"'),
                    Some('"') => break,
                    Some(c) => field.push(c),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(_) => return Err("unexpected text after a closing quote"),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => {
                        fields.push(field);
                        break;
                    }
                    Some('"') => return Err("a quote inside an unquoted field"),
                    Some(c) => field.push(c),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TokenTable, AuthError> {
        TokenTable::parse(Path::new("/etc/leasehold/tokens.csv"), text)
    }

    fn groups(p: &Principal) -> Vec<&str> {
        p.groups.iter().map(String::as_str).collect()
    }

    #[test]
    fn valid_lines_quoted_groups_comments_and_blanks() {
        let t = parse(
            "\u{feff}# token,user,uid,groups\n\
             \n\
             tok-a,alice,1001,\"leasehold:operators, dev\"\r\n\
             \x20 # indented comment\n\
             tok-b,bob,1002\n\
             tok-c, carol ,1003,leasehold:viewers\n\
             \"tok,d\",dave,,\"\"\n\
             tok-e,\"eve \"\"the\"\" admin\",1005,\"system:masters,system:authenticated\"\n",
        )
        .unwrap();
        assert_eq!(t.len(), 5);
        let a = t.authenticate("tok-a").unwrap();
        assert_eq!((a.user.as_str(), a.uid.as_str()), ("alice", "1001"));
        assert_eq!(
            groups(&a),
            ["leasehold:operators", "dev", AUTHENTICATED_GROUP]
        );
        let b = t.authenticate("tok-b").unwrap();
        assert_eq!(groups(&b), [AUTHENTICATED_GROUP]);
        // Leading spaces are trimmed, trailing ones kept (as kube-apiserver does).
        let c = t.authenticate("tok-c").unwrap();
        assert_eq!(c.user, "carol ");
        assert_eq!(groups(&c), ["leasehold:viewers", AUTHENTICATED_GROUP]);
        let d = t.authenticate("tok,d").unwrap();
        assert_eq!((d.user.as_str(), d.uid.as_str()), ("dave", ""));
        let e = t.authenticate("tok-e").unwrap();
        assert_eq!(e.user, "eve \"the\" admin");
        assert_eq!(groups(&e), ["system:masters", AUTHENTICATED_GROUP]);
        assert!(t.authenticate("tok").is_none());
        assert!(t.authenticate("").is_none());
        assert!(t.authenticate("tok-a ").is_none());
    }

    #[test]
    fn empty_file_is_valid() {
        assert_eq!(parse("# nobody yet\n").unwrap().len(), 0);
    }

    #[test]
    fn malformed_lines_name_the_line_and_hide_the_token() {
        let secret = "s3cr3t-T0KEN";
        let cases = [
            format!("ok,u,1\n{secret},bob\n"),
            format!("ok,u,1\n{secret},bob,1,\"g1,g2\n"),
            format!("ok,u,1\n{secret},bob,1,g1,g2\n"),
            format!("ok,u,1\n{secret}\"x,bob,1\n"),
            format!("ok,u,1\n\"{secret}\"x,bob,1\n"),
            format!("ok,u,1\n{secret},,1\n"),
            "ok,u,1\n,bob,1\n".to_owned(),
        ];
        for text in cases {
            let e = parse(&text).expect_err("malformed");
            let AuthError::TokenFile { line, .. } = &e else {
                panic!("{e:?}")
            };
            assert_eq!(*line, 2, "{e}");
            let shown = format!("{e} {e:?}");
            assert!(shown.contains("/etc/leasehold/tokens.csv:2"), "{shown}");
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    #[test]
    fn duplicate_tokens_are_rejected() {
        let e = parse("# users\ndup,alice,1\nother,bob,2\ndup,carol,3\n").expect_err("duplicate");
        let text = e.to_string();
        assert!(text.contains(":4:"), "{text}");
        assert!(text.contains("line 2"), "{text}");
        assert!(!text.contains("dup,"), "{text}");
    }

    #[test]
    fn debug_hides_tokens() {
        let t = parse("hidden-token,alice,1\n").unwrap();
        assert!(!format!("{t:?}").contains("hidden-token"));
    }

    #[tokio::test]
    async fn load_names_a_missing_file() {
        let e = TokenTable::load(Path::new("/nonexistent/tokens.csv"))
            .await
            .expect_err("missing");
        assert!(e.to_string().contains("/nonexistent/tokens.csv"), "{e}");
    }
}
