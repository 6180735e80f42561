//! What a route asks of its caller: an extractor per role. Each takes the
//! [`Caller`] the middleware put in the request and yields the scope the
//! credential grants, or refuses: 403 when the credential lacks the role,
//! 401 when the request carries none.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use kiln_storage::{Role, Scope};

use super::super::error::ApiError;
use super::Caller;

/// The caller's [`Caller`], which the middleware set.
fn caller(request: &HttpRequest) -> Result<Caller, ApiError> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| ApiError::Unauthorized("this route needs a credential".to_owned()))
}

/// The scope of a tenant credential holding `role`.
fn scope_with(request: &HttpRequest, role: Role, doing: &str) -> Result<Scope, ApiError> {
    scope_of(caller(request)?, role, doing)
}

/// The scope of `caller` when it is a tenant's credential holding `role`:
/// 403 naming what `doing` needs otherwise. For callers identified outside
/// actix's routes too (the OTLP gRPC listener).
pub(crate) fn scope_of(caller: Caller, role: Role, doing: &str) -> Result<Scope, ApiError> {
    match caller {
        Caller::Tenant { grant, .. } if grant.roles.contains(role) => Ok(grant.scope),
        Caller::Tenant { grant, .. } => Err(ApiError::Forbidden(format!(
            "{doing} needs a key with the {role} role; this key has {}",
            grant.roles
        ))),
        Caller::Operator => Err(ApiError::Forbidden(format!(
            "{doing} needs a tenant's key; the admin token belongs to no tenant"
        ))),
    }
}

macro_rules! scope_extractor {
    ($(#[$doc:meta])* $name:ident, $role:expr, $doing:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub(crate) struct $name(pub Scope);

        impl FromRequest for $name {
            type Error = ApiError;
            type Future = Ready<Result<Self, ApiError>>;

            fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
                ready(scope_with(request, $role, $doing).map($name))
            }
        }
    };
}

scope_extractor!(
    /// A caller that may read (query, use the UI): its scope.
    Reader,
    Role::Read,
    "reading profiles"
);
scope_extractor!(
    /// A caller that may send profiles and symbols: its scope.
    Ingester,
    Role::Ingest,
    "sending profiles or symbols"
);
scope_extractor!(
    /// A caller that may manage its tenant's keys: its scope.
    KeyAdmin,
    Role::Admin,
    "managing keys"
);

scope_extractor!(
    /// A caller that may save and delete its project's comparisons
    /// (`/api/v1/comparisons`): its scope. The admin role, as for keys:
    /// what is saved runs at every scrape of the tenant's alerts, and
    /// ingest keys sit on every host.
    ComparisonEditor,
    Role::Admin,
    "saving or deleting comparisons"
);

/// Any authenticated caller: a tenant's key or session, or the operator.
/// For routes any credential may use; the middleware has checked there is
/// one, and this checks again where the route is handled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Authenticated;

impl FromRequest for Authenticated {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(caller(request).map(|_| Authenticated))
    }
}

/// The operator: a caller with the server's admin token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operator;

impl FromRequest for Operator {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(match caller(request) {
            Ok(Caller::Operator) => Ok(Operator),
            Ok(Caller::Tenant { .. }) => Err(ApiError::Forbidden(
                "this route needs the server's admin token, not a tenant's key".to_owned(),
            )),
            Err(e) => Err(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;
    use kiln_storage::{Grant, Roles};

    use super::super::Via;
    use super::*;

    fn request(caller: Option<Caller>) -> HttpRequest {
        let request = TestRequest::default().to_http_request();
        if let Some(caller) = caller {
            request.extensions_mut().insert(caller);
        }
        request
    }

    fn status<T: FromRequest<Error = ApiError, Future = Ready<Result<T, ApiError>>>>(
        request: &HttpRequest,
    ) -> u16 {
        use actix_web::ResponseError;
        match T::from_request(request, &mut Payload::None).into_inner() {
            Ok(_) => 200,
            Err(e) => e.status_code().as_u16(),
        }
    }

    #[test]
    fn each_route_gets_the_role_it_needs() {
        let reader = request(Some(Caller::Tenant {
            grant: Grant {
                scope: Scope::new("acme", "web").unwrap(),
                roles: Roles::of(&[Role::Read]),
                key_id: 1,
            },
            via: Via::Key,
        }));
        assert_eq!(status::<Reader>(&reader), 200);
        assert_eq!(status::<Ingester>(&reader), 403);
        assert_eq!(status::<KeyAdmin>(&reader), 403);
        assert_eq!(status::<Operator>(&reader), 403);
        let operator = request(Some(Caller::Operator));
        assert_eq!(status::<Operator>(&operator), 200);
        assert_eq!(status::<Reader>(&operator), 403);
        assert_eq!(status::<Authenticated>(&operator), 200);
        assert_eq!(status::<Authenticated>(&reader), 200);
        let nobody = request(None);
        assert_eq!(status::<Authenticated>(&nobody), 401);
        assert_eq!(status::<Reader>(&nobody), 401);
        assert_eq!(status::<Operator>(&nobody), 401);
    }
}
