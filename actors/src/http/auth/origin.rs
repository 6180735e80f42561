//! Cross-origin state changes are refused. A browser adds `Origin` to every
//! cross-origin request that can change state (and modern ones add
//! `Sec-Fetch-Site`), so comparing it with the request's own host stops a
//! web page a user visits from posting to their Kiln: the page's request
//! would carry the UI's session cookie (were it not SameSite=Strict) or
//! reach `kiln up` on loopback. Programs (agents, the CLI) send no
//! `Origin` and authenticate with a key, which a page cannot know.

use actix_web::HttpRequest;
use actix_web::http::Method;

use super::super::error::ApiError;
use super::{Caller, Via};

/// Whether the method may change state.
fn changes_state(request: &HttpRequest) -> bool {
    !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    )
}

/// Refuses a state-changing request whose `Origin` is not this server's
/// own, or which a browser marks as cross-site.
pub(super) fn check(request: &HttpRequest) -> Result<(), ApiError> {
    if !changes_state(request) {
        return Ok(());
    }
    let headers = request.headers();
    if headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|site| site == "cross-site")
    {
        return Err(refused("a cross-site page"));
    }
    let Some(origin) = headers.get("origin") else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("");
    let host = request.connection_info().host().to_owned();
    if same_host(origin, &host) {
        Ok(())
    } else {
        Err(refused(origin))
    }
}

/// Refuses a state change made with the session cookie unless the browser
/// said where it came from (`Origin`, checked in [`check`]). Requests with a
/// key are programs' and need no `Origin`.
pub(super) fn check_session(request: &HttpRequest, caller: &Caller) -> Result<(), ApiError> {
    let by_session = matches!(
        caller,
        Caller::Tenant {
            via: Via::Session,
            ..
        }
    );
    if by_session && changes_state(request) && request.headers().get("origin").is_none() {
        return Err(ApiError::Forbidden(
            "a state-changing request with the session cookie must carry an Origin header"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Whether `origin` (`scheme://host[:port]`) names `host` (`host[:port]`,
/// as the request addressed it).
fn same_host(origin: &str, host: &str) -> bool {
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let with_port = |a: &str| match a.rsplit_once(':') {
        // An IPv6 literal's colons are inside brackets.
        Some((h, p)) if !p.contains(']') => (h.to_ascii_lowercase(), p.to_owned()),
        _ => (a.to_ascii_lowercase(), default_port.to_owned()),
    };
    with_port(authority) == with_port(host)
}

fn refused(from: &str) -> ApiError {
    ApiError::Forbidden(format!(
        "cross-origin request from {from:?} refused: requests that change state must come \
         from this server's own pages or from a program with an API key"
    ))
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    fn post(host: &str, origin: Option<&str>) -> HttpRequest {
        let mut request = TestRequest::post().insert_header(("host", host));
        if let Some(origin) = origin {
            request = request.insert_header(("origin", origin));
        }
        request.to_http_request()
    }

    #[test]
    fn only_the_servers_own_origin_may_post() {
        assert!(check(&post("127.0.0.1:7070", None)).is_ok());
        assert!(check(&post("127.0.0.1:7070", Some("http://127.0.0.1:7070"))).is_ok());
        assert!(check(&post("kiln.example", Some("https://kiln.example:443"))).is_ok());
        assert!(check(&post("127.0.0.1:7070", Some("http://evil.example"))).is_err());
        assert!(check(&post("127.0.0.1:7070", Some("http://127.0.0.1:8080"))).is_err());
        assert!(check(&post("127.0.0.1:7070", Some("null"))).is_err());
        let cross_site = TestRequest::post()
            .insert_header(("host", "127.0.0.1:7070"))
            .insert_header(("sec-fetch-site", "cross-site"))
            .to_http_request();
        assert!(check(&cross_site).is_err());
        let get = TestRequest::get()
            .insert_header(("host", "127.0.0.1:7070"))
            .insert_header(("origin", "http://evil.example"))
            .to_http_request();
        assert!(check(&get).is_ok(), "reads are not state changes");
    }

    #[test]
    fn ipv6_hosts_compare_with_their_ports() {
        assert!(same_host("http://[::1]:7070", "[::1]:7070"));
        assert!(!same_host("http://[::1]:7071", "[::1]:7070"));
        assert!(same_host("http://[::1]", "[::1]"));
    }
}
