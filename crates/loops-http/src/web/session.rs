//! Dashboard sessions: the login form exchanges the API token for a session cookie
//! (`loops_session`: HttpOnly, SameSite=Strict, Path=/), kept in this server's memory
//! (a restart logs everyone out). Each session has its own CSRF token, which the pages
//! carry in `<meta name="loops-csrf">` and our JavaScript sends as the
//! `X-Loops-CSRF` header on every mutation: a request authorized by the cookie alone
//! may only read (`GET`/`HEAD`); a write needs that header too (or the bearer token).

use axum::http::{header, HeaderMap, Method};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// The cookie's name.
pub const COOKIE: &str = "loops_session";
/// The header a mutation authorized by the cookie must carry.
pub const CSRF_HEADER: &str = "x-loops-csrf";
/// How long a session lasts after login.
pub const LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// Sessions kept at most (the oldest go first).
const MAX_SESSIONS: usize = 1_000;

struct Session {
    csrf: String,
    created: Instant,
}

/// The sessions of this server.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sessions([redacted])")
    }
}

fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// A new session: its id (the cookie's value).
    pub fn open(&self) -> String {
        let id = random_hex();
        let mut map = self.lock();
        map.retain(|_, s| s.created.elapsed() < LIFETIME);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            id.clone(),
            Session {
                csrf: random_hex(),
                created: Instant::now(),
            },
        );
        id
    }

    /// Ends the session of `id`.
    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The CSRF token of the live session `id`.
    pub fn csrf(&self, id: &str) -> Option<String> {
        let map = self.lock();
        // Looked up by every key in constant time: the id is a secret.
        map.iter()
            .find(|(k, s)| {
                bool::from(k.as_bytes().ct_eq(id.as_bytes())) && s.created.elapsed() < LIFETIME
            })
            .map(|(_, s)| s.csrf.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The session of a request (its cookie), with its CSRF token.
    pub fn of_request(&self, headers: &HeaderMap) -> Option<(String, String)> {
        let id = cookie(headers, COOKIE)?;
        let csrf = self.csrf(&id)?;
        Some((id, csrf))
    }

    /// Whether a request is authorized by its session: reads by the cookie, writes by
    /// the cookie and the matching CSRF header.
    pub fn authorizes(&self, method: &Method, headers: &HeaderMap) -> bool {
        let Some((_, csrf)) = self.of_request(headers) else {
            return false;
        };
        if matches!(*method, Method::GET | Method::HEAD) {
            return true;
        }
        headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|sent| bool::from(sent.as_bytes().ct_eq(csrf.as_bytes())))
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim().to_owned())
}

/// The `Set-Cookie` value that opens a session.
pub fn set_cookie(id: &str) -> String {
    format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        LIFETIME.as_secs()
    )
}

/// The `Set-Cookie` value that ends one.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_session_reads_with_its_cookie_and_writes_only_with_its_csrf_token() {
        let sessions = Sessions::default();
        let id = sessions.open();
        let mut h = HeaderMap::new();
        assert!(!sessions.authorizes(&Method::GET, &h));
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={id}")).unwrap_or_else(|e| panic!("{e}")),
        );
        assert!(sessions.authorizes(&Method::GET, &h));
        assert!(!sessions.authorizes(&Method::POST, &h));
        let csrf = sessions.csrf(&id).unwrap_or_default();
        h.insert(CSRF_HEADER, HeaderValue::from_static("wrong"));
        assert!(!sessions.authorizes(&Method::POST, &h));
        h.insert(
            CSRF_HEADER,
            HeaderValue::from_str(&csrf).unwrap_or_else(|e| panic!("{e}")),
        );
        assert!(sessions.authorizes(&Method::POST, &h));
        sessions.close(&id);
        assert!(!sessions.authorizes(&Method::GET, &h));
        assert!(set_cookie(&id).contains("HttpOnly; SameSite=Strict; Path=/"));
    }
}
