//! Dynamic unary gRPC: requests and responses are `prost-reflect` messages, encoded
//! and decoded with a codec that knows the method's descriptors, over tonic.
//!
//! Channels are cached per target (and TLS choice) and connect lazily, so the first
//! call to a target pays for the connection and later calls reuse it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use http::uri::PathAndQuery;
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, MethodDescriptor};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

const DEADLINE_GRACE: Duration = Duration::from_millis(250);

/// Why a call did not produce a response.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The target answered (or the transport failed) with this status.
    Status {
        /// The status code (UNAVAILABLE for connection failures).
        code: Code,
        /// The status message.
        message: String,
    },
    /// No answer within the deadline.
    Deadline(Duration),
}

/// Encodes any message, decodes the method's output type.
#[derive(Clone)]
struct DynamicCodec {
    response: MessageDescriptor,
}

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        DynamicEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        DynamicDecoder {
            response: self.response.clone(),
        }
    }
}

struct DynamicEncoder;

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding the request: {e}")))
    }
}

struct DynamicDecoder {
    response: MessageDescriptor,
}

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        DynamicMessage::decode(self.response.clone(), src)
            .map(Some)
            .map_err(|e| {
                Status::internal(format!(
                    "the response is not a valid {}: {e}",
                    self.response.full_name()
                ))
            })
    }
}

/// A gRPC client for any method of any target, with channels cached per target.
#[derive(Default)]
pub struct GrpcClient {
    channels: Mutex<HashMap<(String, bool), Channel>>,
}

impl GrpcClient {
    /// A client with an empty channel cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn channel(&self, target: &str, tls: bool) -> Result<Channel, CallError> {
        let key = (target.to_owned(), tls);
        // A poisoned lock only means another call panicked mid-insert; the map is
        // still a valid cache.
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(channel) = channels.get(&key) {
            return Ok(channel.clone());
        }
        let unavailable = |e: String| CallError::Status {
            code: Code::Unavailable,
            message: e,
        };
        let scheme = if tls { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{target}"))
            .map_err(|e| unavailable(format!("target '{target}' is not a host:port address: {e}")))?
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true);
        if tls {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().with_webpki_roots())
                .map_err(|e| unavailable(format!("TLS set-up for '{target}': {e}")))?;
        }
        let channel = endpoint.connect_lazy();
        channels.insert(key, channel.clone());
        Ok(channel)
    }

    /// Calls `method` on `target` with `request`, waiting at most `deadline`, sending
    /// `metadata` as request headers.
    pub async fn call(
        &self,
        target: &str,
        tls: bool,
        method: &MethodDescriptor,
        request: DynamicMessage,
        deadline: Duration,
        metadata: &[(String, String)],
    ) -> Result<DynamicMessage, CallError> {
        let channel = self.channel(target, tls)?;
        let path = PathAndQuery::try_from(format!(
            "/{}/{}",
            method.parent_service().full_name(),
            method.name()
        ))
        .map_err(|e| CallError::Status {
            code: Code::Internal,
            message: format!("method path: {e}"),
        })?;
        let mut request = tonic::Request::new(request);
        // The server learns the deadline (grpc-timeout) with a small grace, so that the
        // engine's own timer below always decides first and a late answer is reported
        // as a deadline, never as tonic's local "Timeout expired" cancellation.
        request.set_timeout(deadline + DEADLINE_GRACE);
        for (key, value) in metadata {
            let key = MetadataKey::from_bytes(key.as_bytes());
            let value = MetadataValue::try_from(value.as_str());
            if let (Ok(key), Ok(value)) = (key, value) {
                request.metadata_mut().insert(key, value);
            }
        }
        let codec = DynamicCodec {
            response: method.output(),
        };
        let call = async move {
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready()
                .await
                .map_err(|e| Status::unavailable(format!("target not ready: {e}")))?;
            grpc.unary(request, path, codec).await
        };
        match tokio::time::timeout(deadline, call).await {
            Ok(Ok(response)) => Ok(response.into_inner()),
            Ok(Err(status)) => Err(CallError::Status {
                code: status.code(),
                message: status.message().to_owned(),
            }),
            Err(_) => Err(CallError::Deadline(deadline)),
        }
    }
}
