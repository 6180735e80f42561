//! Request bodies read under a limit per route, on the wire and after
//! decompression. actix's own decoder inflates each received chunk whole
//! before anyone can count it: a 16 KB zstd chunk of zeros becomes
//! hundreds of MiB. Here the body is taken as sent (bounded), then
//! decompressed through a reader that stops one byte past the route's
//! limit, so a body costs at most its limit and the answer is a 413 that
//! names it. A large body lives in a mapping of its own ([`buffer`]),
//! returned to the system as soon as it is dropped. Every route reads its
//! body here, the open login form and the query nodes' internal routes
//! included.

mod buffer;

use std::io::Read;

use actix_web::http::header::{CONTENT_ENCODING, CONTENT_LENGTH};
use actix_web::{HttpRequest, web};
use bytes::Bytes;
use futures_util::StreamExt;

use self::buffer::{BodyBuffer, ExtendError};
use super::error::ApiError;

/// What one route accepts.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    /// What the body is, for messages (`an agent batch`).
    pub what: &'static str,
    /// Largest body after decompression, in bytes.
    pub max_bytes: usize,
}

/// `POST /api/v1/ingest`: one agent batch. Agents send one every few
/// seconds, typically well under a MiB.
pub const INGEST_BODY: BodyLimit = BodyLimit {
    what: "an agent batch",
    max_bytes: 64 << 20,
};

/// `POST /v1development/profiles`: an OTLP profiles request, twice the
/// largest message the OpenTelemetry eBPF profiler sends (32 MiB).
pub const OTLP_BODY: BodyLimit = BodyLimit {
    what: "an OTLP profiles request",
    max_bytes: 64 << 20,
};

/// `POST /ingest` and `POST /push.v1.PusherService/Push`: Pyroscope's
/// SDKs' profiles, a few seconds of one process each (tens of KB to a few
/// MB).
pub const PYROSCOPE_BODY: BodyLimit = BodyLimit {
    what: "a Pyroscope profile",
    max_bytes: 64 << 20,
};

/// `POST /api/v1/import`: a profile file (pprof, perf script, collapsed).
pub const IMPORT_BODY: BodyLimit = BodyLimit {
    what: "an imported profile",
    max_bytes: 256 << 20,
};

/// `PUT /api/v1/symbols/…`: an ELF or debug file. Large: the debug files
/// of big libraries run to hundreds of MiB.
pub const SYMBOLS_BODY: BodyLimit = BodyLimit {
    what: "a symbol upload",
    max_bytes: 1 << 30,
};

/// `PUT /api/v1/symbols/{file_id}` with a ksym body (what agents send):
/// symbols already extracted, a fraction of the ELF's size; the largest
/// libraries' with DWARF run to a few hundred MiB.
pub const KSYM_BODY: BodyLimit = BodyLimit {
    what: "a ksym symbol upload",
    max_bytes: kiln_symbolizer_workers::MAX_KSYM_UPLOAD,
};

/// The JSON bodies of the admin routes.
pub const ADMIN_BODY: BodyLimit = BodyLimit {
    what: "an admin request",
    max_bytes: 64 << 10,
};

/// `POST /login`: the UI's form with one API key. Open to anyone, so
/// small.
pub const LOGIN_BODY: BodyLimit = BodyLimit {
    what: "a login form",
    max_bytes: 4 << 10,
};

/// The bodies query nodes send each other (`/internal/`): a scan (a range
/// and label filters) or a notice, small.
pub const INTERNAL_BODY: BodyLimit = BodyLimit {
    what: "an internal request",
    max_bytes: 256 << 10,
};

/// How a body is compressed (`Content-Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coding {
    Identity,
    Gzip,
    Deflate,
    Zstd,
}

impl Coding {
    fn name(self) -> &'static str {
        match self {
            Coding::Identity => "identity",
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
            Coding::Zstd => "zstd",
        }
    }
}

fn coding(request: &HttpRequest) -> Result<Coding, ApiError> {
    let Some(value) = request.headers().get(CONTENT_ENCODING) else {
        return Ok(Coding::Identity);
    };
    match value.to_str().unwrap_or("").trim() {
        "" | "identity" => Ok(Coding::Identity),
        "gzip" | "x-gzip" => Ok(Coding::Gzip),
        "deflate" => Ok(Coding::Deflate),
        "zstd" => Ok(Coding::Zstd),
        other => Err(ApiError::bad_request(format!(
            "Content-Encoding {other:?} is not accepted (identity, gzip, deflate, zstd)"
        ))),
    }
}

/// Reads the body of `request`, decompressed as its `Content-Encoding`
/// says, refusing it (413) as soon as it is longer than `limit`, sent or
/// decompressed.
pub(crate) async fn read(
    request: &HttpRequest,
    payload: web::Payload,
    limit: BodyLimit,
) -> Result<Bytes, ApiError> {
    Ok(read_counted(request, payload, limit).await?.0)
}

/// [`read`], and how many bytes were sent (before decompression).
pub(crate) async fn read_counted(
    request: &HttpRequest,
    payload: web::Payload,
    limit: BodyLimit,
) -> Result<(Bytes, usize), ApiError> {
    let coding = coding(request)?;
    let sent = read_sent(request, payload.into_inner(), limit).await?;
    let sent_len = sent.len();
    if coding == Coding::Identity {
        return Ok((sent, sent_len));
    }
    // Decompression is CPU-bound: off the event loop.
    let body = web::block(move || inflate(coding, &sent, limit))
        .await
        .map_err(|e| ApiError::internal("decompression worker failed", e))??;
    Ok((body, sent_len))
}

fn too_large(limit: BodyLimit) -> ApiError {
    ApiError::PayloadTooLarge(format!(
        "{} may be at most {} bytes ({} MiB), sent or decompressed",
        limit.what,
        limit.max_bytes,
        limit.max_bytes >> 20
    ))
}

/// The body as sent (not decompressed), at most `limit.max_bytes` of it.
pub(crate) async fn read_sent(
    request: &HttpRequest,
    payload: actix_web::dev::Payload,
    limit: BodyLimit,
) -> Result<Bytes, ApiError> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit.max_bytes) {
        return Err(too_large(limit));
    }
    let mut stream = payload;
    let mut body = buffer(limit, declared.unwrap_or(0))?;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("reading {} failed: {e}", limit.what)))?;
        append(&mut body, &chunk, limit)?;
    }
    Ok(body.freeze())
}

fn buffer(limit: BodyLimit, expected: usize) -> Result<BodyBuffer, ApiError> {
    BodyBuffer::new(limit.max_bytes, expected).map_err(|e| unmapped(limit, e))
}

fn append(body: &mut BodyBuffer, bytes: &[u8], limit: BodyLimit) -> Result<(), ApiError> {
    body.extend(bytes).map_err(|e| match e {
        ExtendError::Full => too_large(limit),
        ExtendError::Map(e) => unmapped(limit, e),
    })
}

fn unmapped(limit: BodyLimit, error: std::io::Error) -> ApiError {
    ApiError::Unavailable(format!(
        "no memory for {} of up to {} MiB: {error}",
        limit.what,
        limit.max_bytes >> 20
    ))
}

/// Decompresses `sent`, reading at most one byte past the limit.
fn inflate(coding: Coding, sent: &[u8], limit: BodyLimit) -> Result<Bytes, ApiError> {
    let reader: Box<dyn Read> = match coding {
        Coding::Identity => Box::new(sent),
        Coding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(sent)),
        Coding::Deflate => Box::new(flate2::read::ZlibDecoder::new(sent)),
        Coding::Zstd => Box::new(
            zstd::stream::read::Decoder::with_buffer(sent)
                .map_err(|e| ApiError::bad_request(format!("{} is not zstd: {e}", limit.what)))?,
        ),
    };
    let mut reader = reader.take(limit.max_bytes as u64 + 1);
    let mut body = buffer(limit, 0)?;
    let mut chunk = vec![0u8; 256 << 10];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(body.freeze()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(ApiError::bad_request(format!(
                    "{} does not decompress as {}: {e}",
                    limit.what,
                    coding.name()
                )));
            }
        };
        append(&mut body, &chunk[..n], limit)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: BodyLimit = BodyLimit {
        what: "a test body",
        max_bytes: 1 << 20,
    };

    /// Guards "a decompression bomb costs the limit, not its size".
    #[test]
    fn bombs_stop_at_the_limit() {
        let zeros = vec![0u8; 64 << 20];
        let bomb = zstd::encode_all(&zeros[..], 19).unwrap();
        assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
        let err = inflate(Coding::Zstd, &bomb, SMALL).unwrap_err();
        assert!(err.to_string().contains("at most 1048576 bytes"), "{err}");

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &zeros).unwrap();
        let bomb = gz.finish().unwrap();
        assert!(inflate(Coding::Gzip, &bomb, SMALL).is_err());
    }

    #[test]
    fn bodies_within_the_limit_decompress() {
        let text = b"main;work 7\n".repeat(1000);
        let z = zstd::encode_all(&text[..], 3).unwrap();
        assert_eq!(&inflate(Coding::Zstd, &z, SMALL).unwrap()[..], &text[..]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &text).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(&inflate(Coding::Gzip, &gz, SMALL).unwrap()[..], &text[..]);
        let err = inflate(Coding::Zstd, b"not zstd", SMALL).unwrap_err();
        assert!(err.to_string().contains("zstd"), "{err}");
    }
}
