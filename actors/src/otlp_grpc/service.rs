//! `ProfilesService/Export`: a tower service in the shape of tonic's
//! generated server, with Kiln's own codec ([`super::codec`]) and handler.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use kiln_formats::otlp::proto::collector::ExportProfilesServiceResponse;
use kiln_storage::{Role, Scope, key_region};
use prost::Message;
use tonic::body::Body;
use tonic::codec::CompressionEncoding;
use tonic::codegen::http;
use tonic::metadata::MetadataMap;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Code, Status};

use super::codec::{Counted, RawRequestCodec, SentBytes};
use super::status;
use crate::http::auth::extract::scope_of;
use crate::http::error::ApiError;
use crate::http::ingest::{admit_tenant, count_answer};
use crate::http::otlp::{Encoding, convert_and_publish};
use crate::http::{AppState, IngestState, region};
use crate::telemetry::Protocol;

/// The gRPC service's full name.
const SERVICE: &str = "opentelemetry.proto.collector.profiles.v1development.ProfilesService";
/// The one method's path.
const EXPORT_PATH: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

/// The largest Export message taken, decompressed: the OTLP/HTTP route's
/// limit (`body::OTLP_BODY`), twice the 32 MiB the OpenTelemetry eBPF
/// profiler sends at most.
pub(super) const MAX_MESSAGE: usize = crate::http::body::OTLP_BODY.max_bytes;

/// What the service needs of the process: the HTTP routes' own state, so
/// gRPC requests are authenticated, metered and published as theirs.
#[derive(Debug)]
struct Shared {
    state: AppState,
    ingest: IngestState,
}

/// `opentelemetry.proto.collector.profiles.v1development.ProfilesService`.
#[derive(Debug, Clone)]
pub(super) struct ProfilesService {
    shared: Arc<Shared>,
}

impl ProfilesService {
    pub(super) fn new(state: AppState, ingest: IngestState) -> Self {
        ProfilesService {
            shared: Arc::new(Shared { state, ingest }),
        }
    }
}

impl NamedService for ProfilesService {
    const NAME: &'static str = SERVICE;
}

impl tonic::codegen::Service<http::Request<Body>> for ProfilesService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != EXPORT_PATH {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        // The handler reads how much was sent from the request's
        // extensions, filled as tonic reads the body.
        let sent = SentBytes::default();
        let (mut parts, body) = request.into_parts();
        parts.extensions.insert(sent.clone());
        let request = http::Request::from_parts(parts, Counted::new(body, sent));
        let export = Export(Arc::clone(&self.shared));
        Box::pin(async move {
            let mut grpc = Grpc::new(RawRequestCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .accept_compressed(CompressionEncoding::Zstd)
                .max_decoding_message_size(MAX_MESSAGE);
            Ok(grpc.unary(export, request).await)
        })
    }
}

/// The Export method.
struct Export(Arc<Shared>);

impl UnaryService<Bytes> for Export {
    type Response = ExportProfilesServiceResponse;
    type Future = BoxFuture<'static, Result<tonic::Response<Self::Response>, Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let shared = Arc::clone(&self.0);
        Box::pin(async move { shared.export(request).await })
    }
}

impl Shared {
    async fn export(
        &self,
        request: tonic::Request<Bytes>,
    ) -> Result<tonic::Response<ExportProfilesServiceResponse>, Status> {
        let key = bearer(request.metadata()).map_err(status::of)?.to_owned();
        if let Some(regions) = &self.state.regions
            && let Some(region) = key_region(&key).filter(|r| *r != regions.here())
        {
            return forward(regions, region, &key, request.into_inner()).await;
        }
        let caller = self
            .state
            .auth
            .identify_bearer(&key)
            .await
            .map_err(status::of)?;
        let scope = scope_of(caller, Role::Ingest, "sending profiles").map_err(status::of)?;
        let sent = request.extensions().get::<SentBytes>().map(SentBytes::get);
        let body = request.into_inner();
        let sent = sent.unwrap_or(body.len() as u64);
        let answer = self.publish(&scope, body, sent).await;
        let partial_success = count_answer(
            self.state.metrics.ingest(),
            &scope,
            Protocol::OtlpGrpc,
            answer,
        )
        .map_err(status::of)?;
        Ok(tonic::Response::new(ExportProfilesServiceResponse {
            partial_success,
        }))
    }

    /// Admits the tenant and the bytes sent, then converts and publishes
    /// as OTLP/HTTP does.
    async fn publish(
        &self,
        scope: &Scope,
        body: Bytes,
        sent: u64,
    ) -> Result<Option<kiln_formats::otlp::proto::collector::ExportProfilesPartialSuccess>, ApiError>
    {
        let limits = admit_tenant(&self.state, scope).await?;
        self.ingest
            .admit_bytes(self.state.metrics.ingest(), scope, &limits, sent)?;
        convert_and_publish(
            &self.state,
            &self.ingest,
            scope,
            &limits,
            body,
            sent,
            Encoding::Protobuf,
        )
        .await
    }
}

/// The API key in the call's `authorization: Bearer KEY` metadata.
fn bearer(metadata: &MetadataMap) -> Result<&str, ApiError> {
    let value = metadata.get("authorization").ok_or_else(|| {
        ApiError::Unauthorized(
            "Export needs an API key: send the metadata \"authorization: Bearer KEY\" (the \
             OpenTelemetry collector's otlp exporter: headers: {authorization: \"Bearer KEY\"})"
                .to_owned(),
        )
    })?;
    value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(|| {
            ApiError::Unauthorized("the authorization metadata is not \"Bearer KEY\"".to_owned())
        })
}

/// Sends a call whose key belongs to `region` to that region's OTLP/HTTP
/// route (the region's public URL is an HTTP one), and gives its answer
/// back as this call's.
async fn forward(
    regions: &region::Regions,
    region: &str,
    key: &str,
    message: Bytes,
) -> Result<tonic::Response<ExportProfilesServiceResponse>, Status> {
    let (code, body) = region::forward_otlp(regions, region, key, message)
        .await
        .map_err(status::of)?;
    if code == 200 {
        return ExportProfilesServiceResponse::decode(body)
            .map(tonic::Response::new)
            .map_err(|e| Status::internal(format!("region {region:?} answered: {e}")));
    }
    Err(match tonic_types::Status::decode(body) {
        Ok(answer) => Status::new(Code::from(answer.code), answer.message),
        Err(_) => Status::internal(format!("region {region:?} answered HTTP {code}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_comes_from_bearer_metadata() {
        let mut metadata = MetadataMap::new();
        let missing = bearer(&metadata).unwrap_err().to_string();
        assert!(missing.contains("authorization: Bearer KEY"), "{missing}");
        metadata.insert("authorization", "Basic abc".parse().unwrap());
        assert!(bearer(&metadata).is_err());
        metadata.insert("authorization", "Bearer kiln_123 ".parse().unwrap());
        assert_eq!(bearer(&metadata).unwrap(), "kiln_123");
    }
}
