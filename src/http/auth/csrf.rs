//! The CSRF check for browser sessions: a state-changing request made with a session cookie
//! must also carry the session's CSRF token (a header or form field the page got at login),
//! which another site cannot read. Only the comparison lives here; where the token travels is
//! the router's choice.

use super::secret::ct_eq;
use super::session::Session;

/// Whether `presented` is `session`'s CSRF token, compared in constant time. An empty
/// presented token never matches.
pub fn check_csrf(session: &Session, presented: &str) -> bool {
    !presented.is_empty() && ct_eq(session.csrf.as_bytes(), presented.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{Principal, Sessions};
    use super::*;

    #[test]
    fn accepts_the_right_token_only() {
        let s = Sessions::new(Duration::from_secs(60));
        let who = Principal {
            user: "alice".into(),
            uid: "1".into(),
            groups: vec![],
        };
        let (id, csrf) = s.create(who.clone()).unwrap();
        let (_, other) = s.create(who).unwrap();
        let session = s.get(&id).unwrap();
        assert!(check_csrf(&session, &csrf));
        assert!(!check_csrf(&session, &other));
        assert!(!check_csrf(&session, ""));
        assert!(!check_csrf(&session, &csrf[..42]));
        assert!(!check_csrf(&session, &format!("{csrf}x")));
        assert!(!check_csrf(&session, id.expose()));
    }
}
