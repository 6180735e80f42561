//! Who is calling. Every request under `/api/` carries a credential, and
//! its scope (tenant, project) comes from that credential only:
//!
//! - an API key, `Authorization: Bearer kiln_…` (agents, the CLI, scripts);
//!   on the Pyroscope routes only (`/ingest`, `/push.v1.PusherService/Push`)
//!   also as the password of HTTP basic auth, `Authorization: Basic
//!   base64(user:KEY)`, which is what Pyroscope's SDKs send (the user is
//!   ignored);
//! - the admin token, `Authorization: Bearer kiln_admin_…` (operators:
//!   tenants, limits, the global symbol store; it has no tenant);
//! - the UI's session cookie ([`session`]), made at `/login` from a key or
//!   from the one-time link `kiln up` prints.
//!
//! [`authenticate`] (a middleware on every route) turns the credential
//! into a [`Caller`] in the request's extensions, or answers 401; routes
//! then ask for the role they need ([`extract`]), 403 when the caller lacks
//! it. State-changing requests from another origin are refused (403) before
//! any of that, so a web page a user visits cannot post to their Kiln.

mod cache;
pub(crate) mod extract;
mod origin;
pub(crate) mod session;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::AUTHORIZATION;
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest, web};
use kiln_storage::{Grant, KeyHash, MetadataStore, TenantLimits};
use tracing::{debug, warn};

use super::error::ApiError;
use super::routes::{Access, access_of};
use crate::admin_token::AdminToken;
use crate::telemetry::{AuthLookup, AuthMetrics, OutageAnswer};
use cache::TtlCache;
use session::{SESSION_COOKIE, Sessions};

/// How long a key's lookup (found or not) is reused: the longest a revoked
/// key keeps working on a node that did not revoke it.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(10);
/// How long a tenant's limits are reused before they are read again.
const LIMITS_CACHE_TTL: Duration = Duration::from_secs(30);
/// How often a key's last use is written at most.
const USE_RECORD_INTERVAL: Duration = Duration::from_secs(60);
/// How long a key's grant and a tenant's limits, once read, are still
/// taken when the metadata store cannot be asked (a database restart): a
/// known key goes on ingesting instead of every agent spooling, and a key
/// revoked on another node meanwhile stays valid here at most this long.
/// Unknown keys are refused as before.
const STALE_IF_ERROR: Duration = Duration::from_secs(600);

/// How a caller proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `Authorization: Bearer KEY`.
    Key,
    /// The UI's session cookie.
    Session,
}

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// A tenant's key (or a session made from one).
    Tenant {
        /// What the key grants.
        grant: Grant,
        /// How it was presented.
        via: Via,
    },
    /// The operator, with the admin token: no tenant of its own.
    Operator,
}

/// Authentication state every HTTP worker shares: the metadata store and
/// caches in front of it, the admin token, and the UI's sessions.
#[derive(Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

struct Inner {
    metadata: Arc<dyn MetadataStore>,
    /// Checks made while `metadata` could not be asked.
    outages: AuthMetrics,
    admin: Option<AdminToken>,
    keys: TtlCache<KeyHash, Option<Grant>>,
    limits: TtlCache<String, TenantLimits>,
    sessions: Sessions,
    /// When each key's use was last written, by (tenant, key id).
    recorded_use: Mutex<std::collections::HashMap<(String, i64), Instant>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("metadata", &self.inner.metadata)
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// Authentication against `metadata`, with `admin` the operator's
    /// token. Sessions are signed with a key derived from the admin token
    /// (so every node that shares it accepts the others' sessions), or
    /// with a random one when there is none.
    pub fn new(
        metadata: Arc<dyn MetadataStore>,
        admin: Option<AdminToken>,
        outages: AuthMetrics,
    ) -> Auth {
        let sessions = Sessions::new(admin.as_ref());
        Auth {
            inner: Arc::new(Inner {
                metadata,
                outages,
                admin,
                keys: TtlCache::new(KEY_CACHE_TTL),
                limits: TtlCache::new(LIMITS_CACHE_TTL),
                sessions,
                recorded_use: Mutex::default(),
            }),
        }
    }

    /// The metadata store.
    pub fn metadata(&self) -> &Arc<dyn MetadataStore> {
        &self.inner.metadata
    }

    /// The operator's token, when the server has one.
    pub fn admin_token(&self) -> Option<&AdminToken> {
        self.inner.admin.as_ref()
    }

    /// The UI's sessions and login links.
    pub fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// Forgets every cached key lookup: after a revocation on this node,
    /// so that it takes effect here at once (other nodes within
    /// [`KEY_CACHE_TTL`]).
    pub(crate) fn forget_keys(&self) {
        self.inner.keys.clear();
    }

    /// Forgets a tenant's cached limits (after they were set here).
    pub(crate) fn forget_limits(&self, tenant: &str) {
        self.inner.limits.remove(&tenant.to_owned());
    }

    fn outage(&self, lookup: AuthLookup, answer: OutageAnswer) {
        self.inner.outages.metadata_unavailable(lookup, answer);
    }

    /// What the key with `hash` grants, through the cache.
    pub(crate) async fn grant_of(&self, hash: &KeyHash) -> Result<Option<Grant>, ApiError> {
        if let Some(grant) = self.inner.keys.get(hash) {
            return Ok(grant);
        }
        let grant = match self.inner.metadata.grant_of(hash).await {
            Ok(grant) => grant,
            Err(e) => {
                if let Some(Some(grant)) = self.inner.keys.get_stale(hash, STALE_IF_ERROR) {
                    debug!(error = %e, "looking up an api key failed: its last grant is taken");
                    self.outage(AuthLookup::Key, OutageAnswer::LastKnown);
                    return Ok(Some(grant));
                }
                warn!(error = %e, "looking up an api key failed");
                self.outage(AuthLookup::Key, OutageAnswer::Refused);
                return Err(ApiError::Unavailable(format!(
                    "cannot check the credential now: {e}"
                )));
            }
        };
        self.inner.keys.insert(*hash, grant.clone());
        Ok(grant)
    }

    /// The tenant's limits as set (fields unset where the server's
    /// defaults apply), through the cache.
    pub(crate) async fn tenant_limits(&self, tenant: &str) -> Result<TenantLimits, ApiError> {
        let name = tenant.to_owned();
        if let Some(limits) = self.inner.limits.get(&name) {
            return Ok(limits);
        }
        let limits = match self.inner.metadata.tenant_limits(tenant).await {
            Ok(limits) => limits,
            // A tenant that has keys exists; one removed since has none.
            Err(kiln_storage::StoreError::NotFound { .. }) => TenantLimits::default(),
            Err(e) => {
                if let Some(limits) = self.inner.limits.get_stale(&name, STALE_IF_ERROR) {
                    debug!(error = %e, tenant, "reading a tenant's limits failed: its last are taken");
                    self.outage(AuthLookup::Limits, OutageAnswer::LastKnown);
                    return Ok(limits);
                }
                self.outage(AuthLookup::Limits, OutageAnswer::Refused);
                return Err(ApiError::Unavailable(format!("cannot read limits: {e}")));
            }
        };
        self.inner.limits.insert(name, limits);
        Ok(limits)
    }

    /// The caller of `request`, from its `Authorization` header or its
    /// session cookie: 401 naming what is missing or wrong.
    pub(crate) async fn identify(&self, request: &HttpRequest) -> Result<Caller, ApiError> {
        if let Some(header) = request.headers().get(AUTHORIZATION) {
            let header = header.to_str().ok();
            if let Some(presented) = header.and_then(|h| h.strip_prefix("Bearer ")) {
                return self.identify_bearer(presented.trim()).await;
            }
            // Basic auth only where Pyroscope's SDKs need it: the rest of
            // the API keeps one credential form.
            if !super::pyroscope::takes_basic_auth(request.match_info().as_str()) {
                return Err(ApiError::Unauthorized(
                    "the Authorization header is not \"Bearer KEY\"".to_owned(),
                ));
            }
            let key = header.and_then(basic_auth_key).ok_or_else(|| {
                ApiError::Unauthorized(
                    "the Authorization header is neither \"Bearer KEY\" nor \"Basic \
                     base64(user:KEY)\" with the API key as the password"
                        .to_owned(),
                )
            })?;
            return self.identify_bearer(&key).await;
        }
        if let Some(cookie) = request.cookie(SESSION_COOKIE) {
            let hash = self.inner.sessions.verify(cookie.value()).ok_or_else(|| {
                ApiError::Unauthorized(
                    "the session has expired or is not valid: log in again at /login".to_owned(),
                )
            })?;
            let grant = self.grant_of(&hash).await?.ok_or_else(|| {
                ApiError::Unauthorized(
                    "the key this session was made from has been revoked: log in again at /login"
                        .to_owned(),
                )
            })?;
            self.note_use(&grant);
            return Ok(Caller::Tenant {
                grant,
                via: Via::Session,
            });
        }
        Err(ApiError::Unauthorized(
            "this route needs an API key: send \"Authorization: Bearer KEY\" (kiln --api-key, \
             KILN_API_KEY), or log in to the UI at /login"
                .to_owned(),
        ))
    }

    /// The caller presenting `presented` as its bearer token.
    pub(crate) async fn identify_bearer(&self, presented: &str) -> Result<Caller, ApiError> {
        if let Some(admin) = &self.inner.admin
            && admin.matches(presented)
        {
            return Ok(Caller::Operator);
        }
        let hash = KeyHash::of_key(presented).ok_or_else(|| {
            ApiError::Unauthorized(
                "the bearer token is not a Kiln API key (kiln_ and 64 hex digits) nor this \
                 server's admin token"
                    .to_owned(),
            )
        })?;
        let grant = self.grant_of(&hash).await?.ok_or_else(|| {
            ApiError::Unauthorized("the API key is unknown or has been revoked".to_owned())
        })?;
        self.note_use(&grant);
        Ok(Caller::Tenant {
            grant,
            via: Via::Key,
        })
    }

    /// Records the key's use, at most once per [`USE_RECORD_INTERVAL`],
    /// in the background: a request never waits for it.
    fn note_use(&self, grant: &Grant) {
        let id = (grant.scope.tenant().to_owned(), grant.key_id);
        {
            let mut recorded = self
                .inner
                .recorded_use
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            match recorded.get(&id) {
                Some(at) if now.duration_since(*at) < USE_RECORD_INTERVAL => return,
                _ => {}
            }
            recorded.insert(id.clone(), now);
        }
        let metadata = Arc::clone(&self.inner.metadata);
        // tokio's spawn, not actix's: the gRPC listener authenticates on a
        // runtime of its own, outside actix's local task sets.
        tokio::spawn(async move {
            if let Err(e) = metadata
                .record_key_use(&id.0, id.1, SystemTime::now())
                .await
            {
                warn!(error = %e, tenant = id.0, key = id.1, "recording an api key's use failed");
            }
        });
    }
}

/// The password of an `Authorization: Basic base64(user:password)` header
/// value with a non-empty password: on the Pyroscope routes, the API key.
pub(crate) fn basic_auth_key(header: &str) -> Option<String> {
    kiln_formats::pyroscope::basic_auth_password(header)
}

/// The middleware: refuses cross-origin state changes, then puts the
/// [`Caller`] of every request whose route needs a credential in its
/// extensions (401 without a valid one). The decision is made on the path
/// the router matches, decoded ([`super::routed_path`]): a request for
/// `/%61pi/v1/…` is one for `/api/v1/…`, and is authenticated as one.
pub async fn authenticate(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    origin::check(request.request())?;
    if access_of(super::routed_path(&request)) == Access::Credential {
        let auth = request
            .app_data::<web::Data<Auth>>()
            .cloned()
            .ok_or_else(|| ApiError::internal_msg("no authentication configured"))?;
        let caller = auth.identify(request.request()).await?;
        origin::check_session(request.request(), &caller)?;
        request.extensions_mut().insert(caller);
    }
    next.call(request).await
}
