//! Compression of Flamewire responses.
//!
//! The `Compress` middleware serves whichever coding the client lists first
//! among those it accepts equally, and Chromium lists gzip before zstd. On
//! a Flamewire, zstd at [`FLAMEWIRE_ZSTD_LEVEL`] is a third smaller than
//! gzip (`flamewire_bench`), so Flamewire bodies are compressed here, with
//! zstd whenever the client accepts it; the middleware leaves a body that
//! already has a `Content-Encoding` alone and compresses the rest as usual.

use actix_web::http::header::{self, AcceptEncoding, ContentEncoding, Encoding, Header};
use actix_web::{HttpRequest, HttpResponse, web};

/// Content type of a Flamewire body.
pub const FLAMEWIRE_CONTENT_TYPE: &str = "application/vnd.kiln.flamewire";

/// zstd level of Flamewire bodies: most of level 19's gain at a fraction
/// of its time (`flamewire_bench` prints both).
pub const FLAMEWIRE_ZSTD_LEVEL: i32 = 9;

/// Whether `req` accepts zstd-coded bodies.
pub(crate) fn accepts_zstd(req: &HttpRequest) -> bool {
    AcceptEncoding::parse(req)
        .ok()
        .and_then(|accept| accept.negotiate([Encoding::zstd()].iter()))
        == Some(Encoding::zstd())
}

/// `body` as a Flamewire response: zstd-coded when `req` accepts it
/// (compressed on the blocking pool, not the worker), else as it is for
/// the middleware to code.
pub(crate) async fn flamewire_response(req: &HttpRequest, body: Vec<u8>) -> HttpResponse {
    let mut response = HttpResponse::Ok();
    response.content_type(FLAMEWIRE_CONTENT_TYPE);
    if !accepts_zstd(req) {
        return response.body(body);
    }
    let compressed = web::block(move || {
        zstd::bulk::compress(&body, FLAMEWIRE_ZSTD_LEVEL).map_err(|e| (e, body))
    })
    .await;
    match compressed {
        Ok(Ok(compressed)) => response
            .insert_header((header::CONTENT_ENCODING, ContentEncoding::Zstd.as_str()))
            .body(compressed),
        Ok(Err((e, body))) => {
            tracing::warn!(error = %e, "compressing a flamewire body failed; sending it raw");
            response.body(body)
        }
        Err(e) => {
            tracing::warn!(error = %e, "the blocking pool is gone; sending an empty body");
            HttpResponse::ServiceUnavailable().finish()
        }
    }
}
