//! The UI's sessions: a signed cookie naming the key the session was made
//! from, and the one-time login links that make one without a key.
//!
//! The cookie holds `HASH.EXPIRES.MAC`: the key's SHA-256 (never the key),
//! the expiry in unix seconds, and an HMAC-SHA256 of both. Each request
//! with it looks the key up by that hash, like a request with the key
//! itself, so revoking the key ends its sessions. The cookie is HttpOnly
//! (page scripts cannot read it) and SameSite=Strict (no other site's
//! request carries it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix_web::cookie::{Cookie, SameSite};
use hmac::{Hmac, KeyInit, Mac};
use kiln_storage::KeyHash;
use sha2::{Digest, Sha256};

use crate::admin_token::AdminToken;

/// The session cookie's name.
pub(crate) const SESSION_COOKIE: &str = "kiln_session";
/// How long a session lasts.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a login link can be used (once).
pub(crate) const LOGIN_LINK_TTL: Duration = Duration::from_secs(24 * 3600);
/// Login links kept at most (each is small; the bound stops a caller who
/// may mint them from growing the map without end).
const MAX_LOGIN_LINKS: usize = 1024;

/// Signs and checks session cookies; keeps the login links not yet used.
pub struct Sessions {
    key: [u8; 32],
    links: Mutex<HashMap<String, (KeyHash, Instant)>>,
}

impl Sessions {
    /// Sessions signed with a key derived from the admin token (the same
    /// on every node that shares it), or with a random key when there is
    /// none (sessions are then this process's alone).
    pub(super) fn new(admin: Option<&AdminToken>) -> Sessions {
        let key = match admin {
            Some(token) => Sha256::new()
                .chain_update(b"kiln session key v1\0")
                .chain_update(token.expose().as_bytes())
                .finalize()
                .into(),
            None => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).expect("the OS gives random bytes");
                key
            }
        };
        Sessions {
            key,
            links: Mutex::default(),
        }
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(payload.as_bytes());
        mac
    }

    /// A session cookie for the key with `hash`, valid for [`SESSION_TTL`];
    /// `secure` (the request came over HTTPS) keeps browsers from ever
    /// sending it over plain HTTP.
    pub fn cookie(&self, hash: &KeyHash, secure: bool) -> Cookie<'static> {
        let expires = unix_now() + SESSION_TTL.as_secs();
        let payload = format!("{}.{expires}", hash.to_hex());
        let mac = hex::encode(self.mac(&payload).finalize().into_bytes());
        Cookie::build(SESSION_COOKIE, format!("{payload}.{mac}"))
            .http_only(true)
            .secure(secure)
            .same_site(SameSite::Strict)
            .path("/")
            .max_age(actix_web::cookie::time::Duration::seconds(
                SESSION_TTL.as_secs() as i64,
            ))
            .finish()
    }

    /// A cookie that ends the session.
    pub fn removal_cookie(&self) -> Cookie<'static> {
        let mut cookie = Cookie::build(SESSION_COOKIE, "")
            .http_only(true)
            .same_site(SameSite::Strict)
            .path("/")
            .finish();
        cookie.make_removal();
        cookie
    }

    /// The key hash a cookie value names, when its MAC is right and it has
    /// not expired.
    pub(super) fn verify(&self, value: &str) -> Option<KeyHash> {
        let (payload, mac) = value.rsplit_once('.')?;
        let mac = hex::decode(mac).ok()?;
        self.mac(payload).verify_slice(&mac).ok()?;
        let (hash, expires) = payload.split_once('.')?;
        let expires: u64 = expires.parse().ok()?;
        (expires > unix_now()).then_some(())?;
        KeyHash::from_hex(hash)
    }

    /// A one-time login link code for the key with `hash`, valid for
    /// [`LOGIN_LINK_TTL`].
    pub fn login_code(&self, hash: KeyHash) -> String {
        let mut code = [0u8; 24];
        getrandom::fill(&mut code).expect("the OS gives random bytes");
        let code = hex::encode(code);
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        links.retain(|_, (_, at)| at.elapsed() < LOGIN_LINK_TTL);
        if links.len() >= MAX_LOGIN_LINKS {
            links.clear();
        }
        links.insert(code.clone(), (hash, Instant::now()));
        code
    }

    /// The key hash of a login link, which is then used up; `None` when
    /// the code is unknown, used or expired.
    pub(crate) fn redeem(&self, code: &str) -> Option<KeyHash> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let (hash, at) = links.remove(code)?;
        (at.elapsed() < LOGIN_LINK_TTL).then_some(hash)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        Sessions::new(Some(&AdminToken::new("0123456789abcdef").unwrap()))
    }

    #[test]
    fn a_cookie_verifies_to_its_key_and_nothing_else_does() {
        let s = sessions();
        let hash = KeyHash([3; 32]);
        let cookie = s.cookie(&hash, false);
        assert!(s.cookie(&hash, true).secure().unwrap());
        assert!(cookie.http_only().unwrap());
        assert_eq!(cookie.same_site(), Some(SameSite::Strict));
        assert_eq!(s.verify(cookie.value()), Some(hash));
        // Another node with the same admin token accepts it.
        assert_eq!(sessions().verify(cookie.value()), Some(hash));
        // A node with another token does not.
        let other = Sessions::new(Some(&AdminToken::new("fedcba9876543210").unwrap()));
        assert_eq!(other.verify(cookie.value()), None);
        // Any change to the hash, the expiry or the MAC breaks it.
        let value = cookie.value();
        let (payload, mac) = value.rsplit_once('.').unwrap();
        let (_, expires) = payload.split_once('.').unwrap();
        let forged = format!("{}.{expires}.{mac}", KeyHash([4; 32]).to_hex());
        assert_eq!(s.verify(&forged), None);
        let later = format!("{}.{}.{mac}", hash.to_hex(), u64::MAX);
        assert_eq!(s.verify(&later), None);
        assert_eq!(s.verify("garbage"), None);
        assert_eq!(s.verify(""), None);
    }

    #[test]
    fn expired_cookies_are_refused() {
        let s = sessions();
        let payload = format!("{}.{}", KeyHash([3; 32]).to_hex(), unix_now() - 1);
        let mac = hex::encode(s.mac(&payload).finalize().into_bytes());
        assert_eq!(s.verify(&format!("{payload}.{mac}")), None);
    }

    #[test]
    fn login_links_work_once() {
        let s = sessions();
        let code = s.login_code(KeyHash([5; 32]));
        assert_eq!(s.redeem("nope"), None);
        assert_eq!(s.redeem(&code), Some(KeyHash([5; 32])));
        assert_eq!(s.redeem(&code), None, "a login link worked twice");
    }
}
