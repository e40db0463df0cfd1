//! A step target that answers what a careless or hostile service might: a response
//! PostgreSQL cannot store (a NUL in a string), or an error whose text holds one.
//! It serves the fixture schema's `jobs.test.ReviewDesk/Review`, which the testkit
//! declares but never serves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};
use workflow::testkit::proto::review_desk_server::{ReviewDesk, ReviewDeskServer};
use workflow::testkit::proto::{Review, Text};

/// What the hostile desk answers.
#[derive(Debug, Clone)]
pub enum HostileAnswer {
    /// A review whose notes are these (with a NUL, say).
    Notes(String),
    /// An INTERNAL status with this message.
    Error(String),
}

#[derive(Clone)]
struct Desk {
    answer: HostileAnswer,
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl ReviewDesk for Desk {
    async fn review(&self, _request: Request<Text>) -> Result<Response<Review>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match &self.answer {
            HostileAnswer::Notes(notes) => Ok(Response::new(Review {
                notes: notes.clone(),
                score: 0,
            })),
            HostileAnswer::Error(message) => Err(Status::internal(message.clone())),
        }
    }
}

/// `ReviewDesk` served on a loopback port until dropped.
pub struct HostileDesk {
    /// Where it listens.
    pub addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl HostileDesk {
    /// Serves `answer` to every call.
    pub async fn start(answer: HostileAnswer) -> HostileDesk {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local addr");
        let calls = Arc::new(AtomicUsize::new(0));
        let desk = Desk {
            answer,
            calls: calls.clone(),
        };
        let (shutdown, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(ReviewDeskServer::new(desk))
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
        });
        HostileDesk {
            addr,
            calls,
            shutdown: Some(shutdown),
        }
    }

    /// `host:port` for envelopes.
    pub fn target(&self) -> String {
        self.addr.to_string()
    }

    /// Calls so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Drop for HostileDesk {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}
