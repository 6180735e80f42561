//! The UI's login: `GET /login?code=…` (the one-time link `kiln up`
//! prints), `GET /login` (a form asking for an API key), `POST /login`
//! (the form's key) and `POST /logout`. Each successful login sets the
//! session cookie ([`super::auth::session`]) and sends the browser to `/`.

use actix_web::http::header::LOCATION;
use actix_web::{HttpRequest, HttpResponse, web};
use kiln_storage::{KeyHash, Role};
use serde::Deserialize;

use super::auth::Auth;
use super::body::{self, LOGIN_BODY};
use super::error::ApiError;

#[derive(Debug, Deserialize)]
pub(crate) struct LoginQuery {
    code: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    key: String,
}

/// `GET /login[?code=CODE]`.
pub(crate) async fn page(
    auth: web::Data<Auth>,
    query: web::Query<LoginQuery>,
    request: HttpRequest,
) -> HttpResponse {
    let Some(code) = &query.code else {
        return form(None);
    };
    match auth.sessions().redeem(code) {
        Some(hash) => start_session(&auth, &hash, &request).await,
        None => form(Some(
            "This login link has been used or has expired. Log in with an API key, or \
             restart kiln up for a new link.",
        )),
    }
}

/// `POST /login` with `key=KEY` (a form): a session for a key that may
/// read. The form is read through the bounded reader ([`body`]): the
/// route is open to anyone, and actix's own form extractor inflates each
/// chunk of a compressed body in full before it counts it.
pub(crate) async fn with_key(
    auth: web::Data<Auth>,
    request: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let sent = body::read(&request, payload, LOGIN_BODY).await?;
    let form: LoginForm = serde_urlencoded::from_bytes(&sent).map_err(|e| {
        ApiError::bad_request(format!("the login form is not key=KEY, URL-encoded: {e}"))
    })?;
    Ok(login_with(&auth, &form, &request).await)
}

async fn login_with(auth: &Auth, form: &LoginForm, request: &HttpRequest) -> HttpResponse {
    if let Some(message) = another_regions_key(form.key.trim(), request) {
        return form_page_status(Some(&message));
    }
    let Some(hash) = KeyHash::of_key(form.key.trim()) else {
        return form_page_status(Some(
            "That is not a Kiln API key (kiln_ and 64 hex digits).",
        ));
    };
    start_session(auth, &hash, request).await
}

/// Why `key` cannot log in here when it is another region's: a browser's
/// session is made at its tenant's home region (see `region.rs`).
fn another_regions_key(key: &str, request: &HttpRequest) -> Option<String> {
    let state = request.app_data::<web::Data<super::AppState>>()?;
    let regions = state.regions.as_ref()?;
    let region = kiln_storage::key_region(key).filter(|r| *r != regions.here())?;
    Some(match regions.url_of(region) {
        Some(url) => format!("This key belongs to region {region}: log in at {url}/login."),
        None => format!("This key belongs to region {region}: log in at that region's address."),
    })
}

/// `POST /logout`: ends the session.
pub(crate) async fn logout(auth: web::Data<Auth>) -> HttpResponse {
    HttpResponse::SeeOther()
        .cookie(auth.sessions().removal_cookie())
        .insert_header((LOCATION, "/login"))
        .finish()
}

/// Sets the session cookie for the key with `hash` when it is live and may
/// read, and sends the browser to the UI.
async fn start_session(auth: &Auth, hash: &KeyHash, request: &HttpRequest) -> HttpResponse {
    let secure = request.connection_info().scheme() == "https";
    match auth.grant_of(hash).await {
        Ok(Some(grant)) if grant.roles.contains(Role::Read) => HttpResponse::SeeOther()
            .cookie(auth.sessions().cookie(hash, secure))
            .insert_header((LOCATION, "/"))
            .finish(),
        Ok(Some(_)) => form_page_status(Some(
            "This key may not read profiles (it lacks the read role): use another.",
        )),
        Ok(None) => form_page_status(Some("This key is unknown or has been revoked.")),
        Err(e) => actix_web::ResponseError::error_response(&e),
    }
}

fn form_page_status(message: Option<&str>) -> HttpResponse {
    let mut response = form(message);
    *response.status_mut() = actix_web::http::StatusCode::UNAUTHORIZED;
    response
}

/// The login form, with `message` above it.
fn form(message: Option<&str>) -> HttpResponse {
    let message = message
        .map(|m| format!("<p class=\"error\">{}</p>", escape(m)))
        .unwrap_or_default();
    let html = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Kiln: log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font-family: system-ui, sans-serif; max-width: 32rem; margin: 4rem auto; padding: 0 1rem; }}
input[type=password] {{ width: 100%; font-family: monospace; padding: .4rem; box-sizing: border-box; }}
button {{ margin-top: .8rem; padding: .4rem 1.2rem; }}
.error {{ color: #b00020; }}
code {{ background: #f3f3f3; padding: 0 .2rem; }}
</style></head>
<body>
<h1>Kiln</h1>
{message}
<form method="post" action="/login">
<label for="key">API key (a key with the read role)</label>
<input type="password" id="key" name="key" autocomplete="off" placeholder="kiln_…" autofocus>
<button type="submit">Log in</button>
</form>
<p><code>kiln up</code> prints a one-time login link when it starts, and keeps a key in
<code>DATA_DIR/api-key</code>. An operator makes keys with <code>kiln tenant create</code> and
<code>kiln key create</code>.</p>
</body></html>"#
    );
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header(("Cache-Control", "no-store"))
        .body(html)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
