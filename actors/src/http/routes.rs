//! The route table: every route each kind of process serves, and who may
//! call it. Routes are registered through a [`Registrar`], which either
//! adds them to an actix app or only lists them ([`route_table`]), so the
//! list the attack tests walk is the one the server serves, never a copy
//! kept by hand.
//!
//! Who may call a route is decided by the authentication middleware on
//! the path the router matches (decoded: `/%61pi/` is `/api/`), from
//! [`access_of`] alone; each route states the access it expects when it is
//! registered, and a test checks that the two agree for every route.

use actix_web::http::Method;
use actix_web::{FromRequest, Handler, Responder, web};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: the route holds no tenant's data (the UI's files, the
    /// login page, the health check, operators' metrics).
    Public,
    /// A credential: a tenant's key, the UI's session, or the admin
    /// token; the handler then asks for the role it needs.
    Credential,
    /// Only the cluster secret, which the handler checks before it reads
    /// anything (query nodes' peers).
    ClusterSecret,
}

/// Who may call `path`, the decoded path the router matches: the
/// middleware's decision. Everything not named public here needs a
/// credential, so a route added anywhere is closed until said otherwise.
pub fn access_of(path: &str) -> Access {
    if path.starts_with("/internal/") {
        return Access::ClusterSecret;
    }
    match path {
        "/" | "/login" | "/logout" | "/healthz" | "/metrics" => Access::Public,
        _ if is_ui_file(path) => Access::Public,
        _ => Access::Credential,
    }
}

/// Whether `path` names a file of the UI directory (`/kiln.js`): one
/// segment, with a dot, as the UI's files have. The `/{file}` handler
/// serves nothing else.
fn is_ui_file(path: &str) -> bool {
    path.strip_prefix('/')
        .is_some_and(|name| !name.contains('/') && name.contains('.') && !name.starts_with('.'))
}

/// One route: method, path pattern (actix's, with `{name}` segments) and
/// who may call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The HTTP method.
    pub method: Method,
    /// The path pattern.
    pub path: &'static str,
    /// Who may call it.
    pub access: Access,
}

impl Route {
    /// The pattern with each `{name}` segment filled with a value of its
    /// kind: a path a request can be sent to.
    pub fn example_path(&self) -> String {
        self.path
            .split('/')
            .map(|segment| match segment {
                "{file_id}" => "0123456789abcdef0123456789abcdef",
                "{tenant}" => "default",
                "{id}" => "1",
                "{file}" => "index.html",
                "{name}" => "watch",
                other => other,
            })
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// Which routes a process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteSet {
    /// `kiln up`: everything but the internal routes.
    All,
    /// `kiln gateway`: ingest, imports, symbol uploads, credentials.
    Gateway,
    /// `kiln query`: queries, symbol uploads, credentials, the UI; with
    /// `internal`, also the routes its peers call.
    Query {
        /// Whether it serves its peers (it has a cluster secret).
        internal: bool,
    },
}

/// Every route of `set`, in the order they are matched.
pub fn route_table(set: RouteSet) -> Vec<Route> {
    let mut registrar = Registrar {
        cfg: None,
        table: Vec::new(),
    };
    register(&mut registrar, set);
    registrar.table
}

/// Adds the routes of `set` to `cfg`.
pub(crate) fn serve(cfg: &mut web::ServiceConfig, set: RouteSet) {
    register(
        &mut Registrar {
            cfg: Some(cfg),
            table: Vec::new(),
        },
        set,
    );
}

fn register(r: &mut Registrar<'_>, set: RouteSet) {
    super::shared_routes(r);
    match set {
        RouteSet::All => {
            super::ingest_routes(r);
            super::query_routes(r);
        }
        RouteSet::Gateway => super::ingest_routes(r),
        RouteSet::Query { internal } => {
            if internal {
                super::internal_routes(r);
            }
            super::query_routes(r);
        }
    }
}

/// Registers routes on an actix app, or only lists them.
pub(crate) struct Registrar<'a> {
    cfg: Option<&'a mut web::ServiceConfig>,
    table: Vec<Route>,
}

impl Registrar<'_> {
    /// Registers `handler` for `method` on `path`, callable by `access`.
    pub(crate) fn route<F, Args>(
        &mut self,
        method: Method,
        path: &'static str,
        access: Access,
        handler: F,
    ) -> &mut Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        if let Some(cfg) = self.cfg.as_deref_mut() {
            cfg.route(path, web::method(method.clone()).to(handler));
        }
        self.table.push(Route {
            method,
            path,
            access,
        });
        self
    }

    /// A route that needs a credential.
    pub(crate) fn api<F, Args>(
        &mut self,
        method: Method,
        path: &'static str,
        handler: F,
    ) -> &mut Self
    where
        F: Handler<Args>,
        Args: FromRequest + 'static,
        F::Output: Responder + 'static,
    {
        self.route(method, path, Access::Credential, handler)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETS: [RouteSet; 4] = [
        RouteSet::All,
        RouteSet::Gateway,
        RouteSet::Query { internal: false },
        RouteSet::Query { internal: true },
    ];

    /// Guards "the middleware lets in exactly what each route expects":
    /// a route registered as public under a path the middleware closes
    /// would be unreachable, and an API route outside `/api/` open.
    #[test]
    fn every_route_gets_the_access_it_was_registered_with() {
        for set in SETS {
            for route in route_table(set) {
                assert_eq!(
                    access_of(&route.example_path()),
                    route.access,
                    "{} {} in {set:?}",
                    route.method,
                    route.path
                );
            }
        }
    }

    #[test]
    fn paths_are_closed_unless_named_public() {
        assert_eq!(access_of("/api/v1/top"), Access::Credential);
        assert_eq!(access_of("/api"), Access::Credential);
        assert_eq!(access_of("/anything/else"), Access::Credential);
        assert_eq!(access_of("//api/v1/top"), Access::Credential);
        assert_eq!(access_of("/.env"), Access::Credential);
        assert_eq!(access_of("/kiln.js"), Access::Public);
        assert_eq!(access_of("/login"), Access::Public);
        assert_eq!(access_of("/internal/v1/scan"), Access::ClusterSecret);
    }

    #[test]
    fn each_set_serves_what_its_role_needs() {
        let has = |set, path: &str| route_table(set).iter().any(|r| r.path == path);
        assert!(has(RouteSet::All, "/api/v1/ingest") && has(RouteSet::All, "/api/v1/top"));
        assert!(has(RouteSet::Gateway, "/api/v1/ingest") && !has(RouteSet::Gateway, "/"));
        assert!(!has(
            RouteSet::Query { internal: false },
            "/internal/v1/scan"
        ));
        assert!(has(RouteSet::Query { internal: true }, "/internal/v1/scan"));
        // The UI's files are matched last: their pattern takes any name.
        let all = route_table(RouteSet::All);
        assert_eq!(all.last().map(|r| r.path), Some("/{file}"));
    }
}
