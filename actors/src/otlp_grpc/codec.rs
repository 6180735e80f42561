//! How the Export call's bytes reach Kiln: the request message undecoded,
//! and the bytes of the request as sent, counted.
//!
//! tonic's generated server decodes the whole request with prost before
//! any code of ours runs. Kiln must first count the request on the wire
//! (refusing by name what is too large to decode safely) and rewrite the
//! sample layout of older senders (opentelemetry-proto 1.9.0), exactly as
//! for OTLP/HTTP, so the message is handed over as bytes
//! ([`RawRequestCodec`]) and converted by [`kiln_formats::otlp::import`].

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use kiln_formats::otlp::proto::collector::ExportProfilesServiceResponse;
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// The Export call's codec: the request's message bytes as tonic has
/// unframed and decompressed them, and a prost-encoded answer.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RawRequestCodec;

impl Codec for RawRequestCodec {
    type Encode = ExportProfilesServiceResponse;
    type Decode = Bytes;
    type Encoder = ResponseEncoder;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> ResponseEncoder {
        ResponseEncoder
    }

    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

/// Hands over a message's bytes as they are.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Encodes the answer with prost.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ResponseEncoder;

impl Encoder for ResponseEncoder {
    type Item = ExportProfilesServiceResponse;
    type Error = Status;

    fn encode(
        &mut self,
        item: ExportProfilesServiceResponse,
        dst: &mut EncodeBuf<'_>,
    ) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the answer: {e}")))
    }
}

/// How many bytes of a request body were sent: gRPC framing included,
/// before decompression, which is what a tenant's `ingest_bytes_per_s`
/// meters on every route.
#[derive(Debug, Clone, Default)]
pub(super) struct SentBytes(Arc<AtomicU64>);

impl SentBytes {
    /// The bytes read so far.
    pub(super) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A request body that adds the length of every data frame read to a
/// [`SentBytes`].
#[derive(Debug)]
pub(super) struct Counted<B> {
    inner: B,
    sent: SentBytes,
}

impl<B> Counted<B> {
    pub(super) fn new(inner: B, sent: SentBytes) -> Self {
        Counted { inner, sent }
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.sent.0.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Full};

    use super::*;

    #[test]
    fn every_data_frame_is_counted() {
        let sent = SentBytes::default();
        let body = Counted::new(Full::new(Bytes::from_static(b"12345678")), sent.clone());
        let read = futures_util::FutureExt::now_or_never(body.collect())
            .unwrap()
            .unwrap();
        assert_eq!(read.to_bytes().len(), 8);
        assert_eq!(sent.get(), 8);
    }
}
