//! Tenants, projects, keys and limits over HTTP.
//!
//! | method | path | who |
//! |---|---|---|
//! | GET, POST | `/api/v1/admin/tenants` | operator (admin token) |
//! | POST | `/api/v1/admin/tenants/{tenant}/projects` | operator |
//! | GET, PUT | `/api/v1/admin/tenants/{tenant}/limits` | operator |
//! | POST | `/api/v1/admin/retention` (a retention pass, now) | operator |
//! | POST | `/api/v1/admin/rollups` (a rollup pass, now) | operator |
//! | GET, POST | `/api/v1/admin/tenants/{tenant}/keys` | operator |
//! | DELETE | `/api/v1/admin/tenants/{tenant}/keys/{id}` | operator |
//! | GET, POST | `/api/v1/keys` | a key with the admin role, its own tenant |
//! | DELETE | `/api/v1/keys/{id}` | a key with the admin role, its own tenant |
//! | GET | `/api/v1/whoami` | any credential |
//!
//! A new key's secret is in the answer that creates it and nowhere else.

use std::time::{SystemTime, UNIX_EPOCH};

use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use kiln_storage::{ApiKeyInfo, NewApiKey, Roles, Scope, TenantLimits};
use serde::{Deserialize, Serialize};

use super::auth::extract::{KeyAdmin, Operator};
use super::auth::{Auth, Caller, Via};
use super::body::{self, ADMIN_BODY};
use super::error::ApiError;
use super::quota::QuotaDefaults;
use super::region;

/// The project a tenant is created with when none is named.
pub const DEFAULT_PROJECT: &str = "default";

/// `POST /api/v1/admin/tenants`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// The tenant's name (`[a-z0-9][a-z0-9_-]{0,62}`).
    pub tenant: String,
    /// Its first project; default [`DEFAULT_PROJECT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Its home region, in a deployment with regions; default the region
    /// asked. Asked elsewhere, the request goes to that region, which
    /// makes the tenant and its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

/// The answer of `GET /api/v1/admin/tenants/{tenant}/region`.
#[derive(Debug, Serialize, Deserialize)]
pub struct TenantHome {
    /// The tenant.
    pub tenant: String,
    /// Its home region; `None` in a deployment without regions.
    pub region: Option<String>,
}

/// `POST …/keys`: a key to make.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// The project it grants; default: the caller's own project (for a
    /// tenant's admin key) or [`DEFAULT_PROJECT`] (for the operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Its roles, `ingest,read`.
    pub roles: String,
    /// What it is for.
    #[serde(default)]
    pub label: String,
}

/// A key as listed (no secret), or as made (with it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KeyView {
    /// The key's id (to revoke it).
    pub id: i64,
    /// Its tenant.
    pub tenant: String,
    /// Its project.
    pub project: String,
    /// `ingest,read`, …
    pub roles: String,
    /// What it is for.
    pub label: String,
    /// Its first characters.
    pub prefix: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds of its last recorded use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<u64>,
    /// Whether it was revoked.
    pub revoked: bool,
    /// The secret: only in the answer that creates the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `GET /api/v1/admin/tenants`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantView {
    /// The tenant.
    pub tenant: String,
    /// Its projects.
    pub projects: Vec<String>,
}

/// `GET …/limits`: what was set, and what applies (defaults filled in).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LimitsView {
    /// As set for the tenant.
    pub set: TenantLimits,
    /// What applies: the set ones, else the server's defaults.
    pub effective: TenantLimits,
    /// The tenant's stored bytes now (what `max_stored_bytes` is checked
    /// against), up to a few seconds old; absent where it could not be
    /// read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<u64>,
}

/// `GET /api/v1/whoami`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WhoAmI {
    /// The tenant; absent for the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The project; absent for the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// `ingest,read`, …; `operator` for the admin token.
    pub roles: String,
    /// `key`, `session` or `admin-token`.
    pub via: String,
}

fn unix(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl KeyView {
    fn of(info: ApiKeyInfo, key: Option<String>) -> KeyView {
        KeyView {
            id: info.id,
            tenant: info.scope.tenant().to_owned(),
            project: info.scope.project().to_owned(),
            roles: info.roles.to_string(),
            label: info.label,
            prefix: info.prefix,
            created_at: unix(info.created_at),
            last_used: info.last_used.map(unix),
            revoked: info.revoked,
            key,
        }
    }

    /// A key as made by `request`: tagged with this region where there
    /// are regions ([`super::region`]).
    fn made(new: NewApiKey, request: &HttpRequest) -> KeyView {
        let regions = request
            .app_data::<web::Data<super::AppState>>()
            .and_then(|state| state.regions.as_ref());
        let secret = match regions {
            Some(regions) => regions.key_for_owner(&new.key),
            None => new.key.expose().to_owned(),
        };
        KeyView::of(new.info, Some(secret))
    }
}

async fn json_body<T: serde::de::DeserializeOwned>(
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<T, ApiError> {
    let bytes = body::read(request, payload, ADMIN_BODY).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

fn scope(tenant: &str, project: &str) -> Result<Scope, ApiError> {
    Ok(Scope::new(tenant, project)?)
}

/// `POST /api/v1/admin/tenants` `{"tenant": NAME, "project": P,
/// "region": R}`: creates the tenant, its project and a key with ingest
/// and read rights on it.
///
/// In a deployment with regions, a tenant's name is one across them all
/// and the tenant lives in its home region (`region`, default this one).
/// Asked for another home, this region forwards the request there. The
/// home region first asks every other region whether the name is taken
/// (a 409 naming the region that has it; a 503 when a region cannot be
/// asked, since a name checked against part of the deployment could be
/// made twice). The regions' own metadata is the directory of where each
/// tenant lives (`GET …/tenants/{tenant}/region`): no database of its own
/// to keep consistent with them.
pub(crate) async fn create_tenant(
    _: Operator,
    auth: web::Data<Auth>,
    state: web::Data<super::AppState>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let sent = body::read(&request, payload, ADMIN_BODY).await?;
    let body: CreateTenant = serde_json::from_slice(&sent)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    let project = body.project.as_deref().unwrap_or(DEFAULT_PROJECT);
    let scope = scope(&body.tenant, project)?;
    match (&state.regions, body.region.as_deref()) {
        (None, Some(region)) => {
            return Err(ApiError::bad_request(format!(
                "this deployment has no regions; leave out \"region\" ({region:?})"
            )));
        }
        (None, None) => {}
        (Some(regions), Some(home)) if home != regions.here() => {
            return region::forward_to(regions, home, &request, sent).await;
        }
        (Some(regions), _) => {
            let path = format!("/api/v1/admin/tenants/{}/region", scope.tenant());
            if let Some((elsewhere, _)) = region::ask_peers(regions, &request, &path).await? {
                return Err(ApiError::Conflict(format!(
                    "tenant {:?} already exists, homed in region {elsewhere:?}",
                    scope.tenant()
                )));
            }
        }
    }
    let metadata = auth.metadata();
    metadata.create_tenant(scope.tenant()).await?;
    metadata.create_project(&scope).await?;
    let key = metadata
        .create_api_key(&scope, "made with the tenant", Roles::INGEST_READ)
        .await?;
    tracing::info!(
        tenant = scope.tenant(),
        project = scope.project(),
        "tenant created"
    );
    Ok(HttpResponse::Created().json(KeyView::made(key, &request)))
}

/// `GET /api/v1/admin/tenants/{tenant}/region`: where the tenant lives.
/// Answered from this region's metadata when it is homed here, else by
/// asking the other regions (each answers from itself only); 404 when no
/// region has it.
pub(crate) async fn tenant_region(
    _: Operator,
    auth: web::Data<Auth>,
    state: web::Data<super::AppState>,
    request: HttpRequest,
    tenant: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let tenant = tenant.into_inner();
    Scope::validate_tenant(&tenant)?;
    let here = state.regions.as_ref().map(|r| r.here().to_owned());
    if auth.metadata().list_tenants().await?.contains(&tenant) {
        return Ok(HttpResponse::Ok().json(TenantHome {
            tenant,
            region: here,
        }));
    }
    let path = format!("/api/v1/admin/tenants/{tenant}/region");
    if let Some(regions) = &state.regions
        && !region::forwarded(&request)
        && let Some((_, answer)) = region::ask_peers(regions, &request, &path).await?
    {
        return Ok(HttpResponse::Ok()
            .content_type("application/json")
            .body(answer));
    }
    Err(ApiError::NotFound(format!(
        "no region has tenant {tenant:?}"
    )))
}

/// `GET /api/v1/admin/tenants`.
pub(crate) async fn list_tenants(
    _: Operator,
    auth: web::Data<Auth>,
) -> Result<HttpResponse, ApiError> {
    let metadata = auth.metadata();
    let mut tenants = Vec::new();
    for tenant in metadata.list_tenants().await? {
        let projects = metadata.list_projects(&tenant).await?;
        tenants.push(TenantView { tenant, projects });
    }
    Ok(HttpResponse::Ok().json(tenants))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateProject {
    project: String,
}

/// `POST /api/v1/admin/tenants/{tenant}/projects` `{"project": P}`.
pub(crate) async fn create_project(
    _: Operator,
    auth: web::Data<Auth>,
    tenant: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body: CreateProject = json_body(&request, payload).await?;
    let scope = scope(&tenant, &body.project)?;
    auth.metadata().create_project(&scope).await?;
    Ok(HttpResponse::Created().json(serde_json::json!({
        "tenant": scope.tenant(),
        "project": scope.project(),
    })))
}

/// `POST /api/v1/admin/retention`: runs a pass of the retention job now
/// and answers what it deleted (404 where this process does not run the
/// job: a gateway).
pub(crate) async fn run_retention(
    _: Operator,
    state: web::Data<super::AppState>,
) -> Result<HttpResponse, ApiError> {
    let Some(retention) = &state.retention else {
        return Err(ApiError::NotFound(
            "this process does not run the retention job (query nodes and kiln up do)".into(),
        ));
    };
    let report = retention.run_once(kiln_model::now_ns()).await;
    Ok(HttpResponse::Ok().json(report))
}

/// The query of `POST /api/v1/admin/rollups`.
#[derive(Debug, Deserialize)]
pub(crate) struct RollupsQuery {
    /// Run the pass as if at this time (`parse_time`'s forms): a later
    /// time also rolls and seals the hours before it that have not yet
    /// settled, which a benchmark or an operator draining a region wants.
    now: Option<String>,
}

/// `POST /api/v1/admin/rollups[?now=TIME]`: runs a pass of the rollup job
/// now (hours that ended at least `ROLLUP_SETTLE_NS` ago: rolled up, and
/// sealed where the store seals) and answers what it did.
pub(crate) async fn run_rollups(
    _: Operator,
    state: web::Data<super::AppState>,
    query: web::Query<RollupsQuery>,
) -> Result<HttpResponse, ApiError> {
    let Some(rollups) = &state.rollups else {
        return Err(ApiError::NotFound(
            "this process does not run the rollup job (query nodes and kiln up do)".into(),
        ));
    };
    let now = kiln_model::now_ns();
    let at = match &query.now {
        None => now,
        Some(text) => super::params::parse_time(text, now)
            .map_err(|e| ApiError::BadRequest(format!("now: {e}")))?,
    };
    let report = rollups.run_once(at).await;
    Ok(HttpResponse::Ok().json(report))
}

/// `GET /api/v1/admin/tenants/{tenant}/limits`.
pub(crate) async fn get_limits(
    _: Operator,
    state: web::Data<super::AppState>,
    defaults: web::Data<QuotaDefaults>,
    tenant: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let set = state.auth.metadata().tenant_limits(&tenant).await?;
    Ok(HttpResponse::Ok().json(LimitsView {
        set,
        effective: set.or(defaults.limits()),
        stored_bytes: state.stored.of(&tenant).await.ok(),
    }))
}

/// `PUT /api/v1/admin/tenants/{tenant}/limits` with a [`TenantLimits`]:
/// replaces all of them (an absent field: the server's default).
pub(crate) async fn set_limits(
    _: Operator,
    auth: web::Data<Auth>,
    defaults: web::Data<QuotaDefaults>,
    tenant: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let limits: TenantLimits = json_body(&request, payload).await?;
    auth.metadata().set_tenant_limits(&tenant, &limits).await?;
    auth.forget_limits(&tenant);
    Ok(HttpResponse::Ok().json(LimitsView {
        set: limits,
        effective: limits.or(defaults.limits()),
        stored_bytes: None,
    }))
}

async fn list_keys_of(auth: &Auth, tenant: &str) -> Result<HttpResponse, ApiError> {
    let keys: Vec<KeyView> = auth
        .metadata()
        .list_api_keys(tenant)
        .await?
        .into_iter()
        .map(|info| KeyView::of(info, None))
        .collect();
    Ok(HttpResponse::Ok().json(keys))
}

async fn create_key_in(
    auth: &Auth,
    tenant: &str,
    default_project: &str,
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body: CreateKey = json_body(request, payload).await?;
    let roles: Roles = body
        .roles
        .parse()
        .map_err(|e: kiln_storage::UnknownRole| ApiError::bad_request(e.to_string()))?;
    let project = body.project.as_deref().unwrap_or(default_project);
    let scope = scope(tenant, project)?;
    let key = auth
        .metadata()
        .create_api_key(&scope, &body.label, roles)
        .await?;
    Ok(HttpResponse::Created().json(KeyView::made(key, request)))
}

async fn revoke_key_in(auth: &Auth, tenant: &str, id: i64) -> Result<HttpResponse, ApiError> {
    if !auth.metadata().revoke_api_key(tenant, id).await? {
        return Err(ApiError::NotFound(format!(
            "tenant {tenant:?} has no live key {id}"
        )));
    }
    // Take effect on this node at once (others: within the cache's TTL).
    auth.forget_keys();
    tracing::info!(tenant, key = id, "api key revoked");
    Ok(HttpResponse::NoContent().finish())
}

/// `GET /api/v1/admin/tenants/{tenant}/keys`.
pub(crate) async fn operator_list_keys(
    _: Operator,
    auth: web::Data<Auth>,
    tenant: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    list_keys_of(&auth, &tenant).await
}

/// `POST /api/v1/admin/tenants/{tenant}/keys` with a [`CreateKey`].
pub(crate) async fn operator_create_key(
    _: Operator,
    auth: web::Data<Auth>,
    tenant: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    create_key_in(&auth, &tenant, DEFAULT_PROJECT, &request, payload).await
}

/// `DELETE /api/v1/admin/tenants/{tenant}/keys/{id}`.
pub(crate) async fn operator_revoke_key(
    _: Operator,
    auth: web::Data<Auth>,
    path: web::Path<(String, i64)>,
) -> Result<HttpResponse, ApiError> {
    let (tenant, id) = path.into_inner();
    revoke_key_in(&auth, &tenant, id).await
}

/// `GET /api/v1/keys`: the caller's tenant's keys.
pub(crate) async fn list_keys(
    KeyAdmin(scope): KeyAdmin,
    auth: web::Data<Auth>,
) -> Result<HttpResponse, ApiError> {
    list_keys_of(&auth, scope.tenant()).await
}

/// `POST /api/v1/keys` with a [`CreateKey`]: a key of the caller's tenant.
pub(crate) async fn create_key(
    KeyAdmin(scope): KeyAdmin,
    auth: web::Data<Auth>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    create_key_in(&auth, scope.tenant(), scope.project(), &request, payload).await
}

/// `DELETE /api/v1/keys/{id}`: revokes a key of the caller's tenant.
pub(crate) async fn revoke_key(
    KeyAdmin(scope): KeyAdmin,
    auth: web::Data<Auth>,
    id: web::Path<i64>,
) -> Result<HttpResponse, ApiError> {
    revoke_key_in(&auth, scope.tenant(), id.into_inner()).await
}

/// `GET /api/v1/whoami`: what the caller's credential grants.
pub(crate) async fn whoami(request: HttpRequest) -> Result<HttpResponse, ApiError> {
    let caller = request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ApiError::Unauthorized("no credential".to_owned()))?;
    let answer = match caller {
        Caller::Operator => WhoAmI {
            tenant: None,
            project: None,
            roles: "operator".to_owned(),
            via: "admin-token".to_owned(),
        },
        Caller::Tenant { grant, via } => WhoAmI {
            tenant: Some(grant.scope.tenant().to_owned()),
            project: Some(grant.scope.project().to_owned()),
            roles: grant.roles.to_string(),
            via: match via {
                Via::Key => "key",
                Via::Session => "session",
            }
            .to_owned(),
        },
    };
    Ok(HttpResponse::Ok().json(answer))
}
