//! Compression of Flamewire responses.
//!
//! The `Compress` middleware codes every body on the worker thread, with
//! zstd at level 3 or gzip, as the client's `Accept-Encoding` ranks them.
//! A Flamewire is compressed here instead: with zstd whenever the client
//! accepts it, at [`FLAMEWIRE_ZSTD_LEVEL`] (11% smaller than level 3 on the
//! 1M-node graph of `flamewire_bench`: in the browser bench, 58× smaller
//! than the same graph's JSON where level 3 would give about 52×), on the
//! blocking pool. The middleware leaves a body that
//! already has a `Content-Encoding` alone and codes the rest as usual.

use actix_web::http::header::{self, AcceptEncoding, ContentEncoding, Encoding, Header};
use actix_web::{HttpRequest, HttpResponse, web};

/// Content type of a Flamewire body.
pub const FLAMEWIRE_CONTENT_TYPE: &str = "application/vnd.kiln.flamewire";

/// zstd level of Flamewire bodies: most of level 19's gain at a thirtieth
/// of its time (`flamewire_bench` prints the levels' sizes and times).
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
            tracing::warn!(error = %e, "the blocking pool is gone; answering 503");
            HttpResponse::ServiceUnavailable().finish()
        }
    }
}
