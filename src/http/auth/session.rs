//! Browser sessions: an in-memory store from session id to the logged-in [`Principal`] and
//! its CSRF token.
//!
//! Ids and CSRF tokens are 32 random bytes from the system CSPRNG, base64url. The store is
//! keyed by the SHA-256 of the id, so it holds no usable id, and neither [`SessionId`] nor
//! [`Session`] prints its secret in `Debug` (there is no `Display`). Lifetime is absolute: a
//! session ends `ttl` after login however busy it is, so a stolen cookie is good for at most
//! that long and the cookie's `Max-Age` can simply be the TTL. The store is bounded; when full,
//! expired sessions go first, then the oldest. Sessions do not survive a restart (users log in
//! again), and are not shared between replicas.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ring::rand::SystemRandom;

use super::secret::{Digest, ct_eq, random_token, sha256};
use super::{AuthError, Principal};

/// Sessions held at most. Far above the number of operators of one installation; it only
/// stops a login loop from growing memory without end (each session is well under 1 KiB).
pub const MAX_SESSIONS: usize = 10_000;

/// A session id, as sent in the session cookie. Its `Debug` hides the value; use
/// [`SessionId::expose`] only to write the cookie.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionId(String);

impl SessionId {
    /// The id as presented by a client (the cookie value).
    pub fn from_presented(value: &str) -> Self {
        Self(value.to_owned())
    }

    /// The secret value, to put in a `Set-Cookie` header. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionId(<redacted>)")
    }
}

/// A logged-in browser.
#[derive(Clone)]
pub struct Session {
    /// Who logged in.
    pub principal: Principal,
    /// The token the page must send back with every state-changing request; compare with
    /// [`Session::csrf_matches`].
    pub csrf: String,
    /// When the session ends.
    pub expires: Instant,
}

impl Session {
    /// Whether `presented` is this session's CSRF token, compared in constant time. An empty
    /// presented token never matches. (Where the token travels, a header or a form field, is
    /// the CSRF guard's choice: `http::csrf`.)
    pub fn csrf_matches(&self, presented: &str) -> bool {
        !presented.is_empty() && ct_eq(self.csrf.as_bytes(), presented.as_bytes())
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("principal", &self.principal)
            .field("csrf", &"<redacted>")
            .field("expires", &self.expires)
            .finish()
    }
}

/// The session store. Cheap to clone (one shared map).
#[derive(Clone)]
pub struct Sessions {
    by_id: Arc<Mutex<HashMap<Digest, Session>>>,
    ttl: Duration,
    max: usize,
    rng: SystemRandom,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("sessions", &self.len())
            .field("ttl", &self.ttl)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// A store whose sessions last `ttl`, holding at most [`MAX_SESSIONS`].
    pub fn new(ttl: Duration) -> Self {
        Self::with_capacity(ttl, MAX_SESSIONS)
    }

    /// A store whose sessions last `ttl`, holding at most `max` (at least one).
    pub fn with_capacity(ttl: Duration, max: usize) -> Self {
        Self {
            by_id: Arc::default(),
            ttl,
            max: max.max(1),
            rng: SystemRandom::new(),
        }
    }

    /// How long a session lasts (for the cookie's `Max-Age`).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Starts a session for `principal`: its id (for the cookie) and CSRF token (for the page).
    pub fn create(&self, principal: Principal) -> Result<(SessionId, String), AuthError> {
        self.create_at(principal, Instant::now())
    }

    /// The live session with this id, if any.
    pub fn get(&self, id: &SessionId) -> Option<Session> {
        self.get_at(id, Instant::now())
    }

    /// Ends a session (logout). Returns whether it existed.
    pub fn remove(&self, id: &SessionId) -> bool {
        self.lock().remove(&sha256(&id.0)).is_some()
    }

    /// Sessions held (expired ones included until touched or evicted).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn create_at(
        &self,
        principal: Principal,
        now: Instant,
    ) -> Result<(SessionId, String), AuthError> {
        let id = random_token(&self.rng)?;
        let csrf = random_token(&self.rng)?;
        let session = Session {
            principal,
            csrf: csrf.clone(),
            expires: now + self.ttl,
        };
        let mut map = self.lock();
        if map.len() >= self.max {
            map.retain(|_, s| s.expires > now);
            while map.len() >= self.max {
                let Some(oldest) = map.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k)
                else {
                    break;
                };
                map.remove(&oldest);
            }
        }
        map.insert(sha256(&id), session);
        Ok((SessionId(id), csrf))
    }

    fn get_at(&self, id: &SessionId, now: Instant) -> Option<Session> {
        let key = sha256(&id.0);
        let mut map = self.lock();
        match map.get(&key) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        }
    }

    /// The map. A panic while holding the lock cannot leave it half-updated (every change is
    /// one insert or remove), so a poisoned lock is used as is.
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Digest, Session>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_matches_the_right_token_only() {
        let s = Sessions::new(Duration::from_secs(60));
        let (id, csrf) = s.create(who("alice")).unwrap();
        let (_, other) = s.create(who("alice")).unwrap();
        let session = s.get(&id).unwrap();
        assert!(session.csrf_matches(&csrf));
        assert!(!session.csrf_matches(&other));
        assert!(!session.csrf_matches(""));
        assert!(!session.csrf_matches(&csrf[..42]));
        assert!(!session.csrf_matches(&format!("{csrf}x")));
        assert!(!session.csrf_matches(id.expose()));
    }

    fn who(name: &str) -> Principal {
        Principal {
            user: name.into(),
            uid: String::new(),
            groups: vec!["leasehold:viewers".into()],
        }
    }

    #[test]
    fn create_get_remove() {
        let s = Sessions::new(Duration::from_secs(60));
        let (id, csrf) = s.create(who("alice")).unwrap();
        assert_eq!(id.expose().len(), 43);
        assert_eq!(csrf.len(), 43);
        assert_ne!(id.expose(), csrf);
        let got = s.get(&id).unwrap();
        assert_eq!(got.principal, who("alice"));
        assert_eq!(got.csrf, csrf);
        // A presented copy of the id finds it too; a different one does not.
        assert!(s.get(&SessionId::from_presented(id.expose())).is_some());
        assert!(s.get(&SessionId::from_presented("nope")).is_none());
        assert!(s.remove(&id));
        assert!(!s.remove(&id));
        assert!(s.get(&id).is_none());
        assert!(s.is_empty());
    }

    #[test]
    fn sessions_expire_absolutely() {
        let s = Sessions::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let (id, _) = s.create_at(who("alice"), t0).unwrap();
        // Use does not extend the session.
        assert!(s.get_at(&id, t0 + Duration::from_secs(30)).is_some());
        assert!(s.get_at(&id, t0 + Duration::from_secs(59)).is_some());
        assert!(s.get_at(&id, t0 + Duration::from_secs(60)).is_none());
        assert_eq!(s.len(), 0, "an expired session is dropped when seen");
    }

    #[test]
    fn bounded_evicting_expired_then_oldest() {
        let s = Sessions::with_capacity(Duration::from_secs(60), 3);
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let (a, _) = s.create_at(who("a"), at(0)).unwrap();
        let (b, _) = s.create_at(who("b"), at(10)).unwrap();
        let (c, _) = s.create_at(who("c"), at(20)).unwrap();
        let (d, _) = s.create_at(who("d"), at(30)).unwrap();
        assert_eq!(s.len(), 3);
        assert!(s.get_at(&a, at(30)).is_none(), "oldest evicted");
        assert!(s.get_at(&b, at(30)).is_some());
        // Full again at 75 s: b (expired at 70) goes; c and d, still live, stay.
        let (e, _) = s.create_at(who("e"), at(75)).unwrap();
        assert_eq!(s.len(), 3);
        assert!(s.get_at(&c, at(75)).is_some());
        assert!(s.get_at(&d, at(75)).is_some());
        assert!(s.get_at(&e, at(75)).is_some());
    }

    #[test]
    fn debug_hides_ids_and_csrf_tokens() {
        let s = Sessions::new(Duration::from_secs(60));
        let (id, csrf) = s.create(who("alice")).unwrap();
        let session = s.get(&id).unwrap();
        let shown = format!("{id:?} {session:?} {s:?}");
        assert!(!shown.contains(id.expose()), "{shown}");
        assert!(!shown.contains(&csrf), "{shown}");
        assert!(shown.contains("alice"));
    }
}
