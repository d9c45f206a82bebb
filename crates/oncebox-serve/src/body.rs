//! A request body that must arrive within a deadline: a client that sends its head and then
//! trickles the body (or stops) holds a connection slot no longer than the head timeout would.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};

/// The error a body read gives once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

/// True when `e` (as a body read or an extractor reports it) is a [`BodyTimedOut`].
pub fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(e) = source {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// `inner`, whose whole content must be read within `limit` of now.
pub(crate) fn timed(inner: Body, limit: Duration) -> Body {
    Body::new(TimedBody {
        inner,
        deadline: Box::pin(tokio::time::sleep(limit)),
        limit,
    })
}

struct TimedBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(this.limit))))),
            Poll::Pending => Poll::Pending,
        }
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
    use super::*;

    #[tokio::test]
    async fn a_body_that_stops_fails_at_its_deadline() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        tx.send(Ok(Bytes::from_static(b"half")))
            .await
            .expect("send");
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (chunk, rx))
        });
        let body = timed(Body::from_stream(stream), Duration::from_millis(100));
        let read = axum::body::to_bytes(body, 1024).await;
        let e = read.expect_err("the rest never comes");
        assert!(timed_out(&e), "{e}");
        drop(tx);
    }

    #[tokio::test]
    async fn a_whole_body_is_read() {
        let body = timed(Body::from("all of it"), Duration::from_millis(100));
        let read = axum::body::to_bytes(body, 1024).await.expect("read");
        assert_eq!(&read[..], b"all of it");
    }
}
