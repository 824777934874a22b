//! Inbound frames as a stream: [`Inbound`], what
//! [`Established::start_channel`](crate::Established::start_channel)
//! returns, fed by a [`Handler`] that hands on one batch per read through
//! a bounded channel.
//!
//! When the channel is full, the handler's [`on_batch_end`](Handler::on_batch_end)
//! waits, the reader stops reading, and TCP pushes back on the peer.

use std::{
    collections::VecDeque,
    future::Future,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::sync::mpsc;

use crate::{frame::Frame, reader::Handler, shared::CloseReason};

/// Batches delivered through a channel: one `Vec` per read, recycled.
#[derive(Debug)]
pub(crate) struct ChannelHandler {
    batch: Vec<Frame>,
    tx: Option<mpsc::Sender<Vec<Frame>>>,
    spare: Arc<Mutex<Vec<Vec<Frame>>>>,
    reason: Arc<Mutex<Option<CloseReason>>>,
}

impl ChannelHandler {
    pub(crate) fn new(capacity: usize) -> (Self, Inbound) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let spare = Arc::new(Mutex::new(Vec::new()));
        let reason = Arc::new(Mutex::new(None));
        (
            Self {
                batch: Vec::new(),
                tx: Some(tx),
                spare: spare.clone(),
                reason: reason.clone(),
            },
            Inbound {
                rx,
                current: VecDeque::new(),
                spare,
                reason,
            },
        )
    }
}

impl Handler for ChannelHandler {
    fn on_frame(&mut self, frame: Frame) {
        self.batch.push(frame);
    }

    fn on_batch_end(&mut self) -> impl Future<Output = ()> + Send {
        let next = self
            .spare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, next);
        let tx = self.tx.clone();
        async move {
            if batch.is_empty() {
                return;
            }
            if let Some(tx) = tx {
                // An error means the Inbound was dropped: frames are discarded.
                let _ = tx.send(batch).await;
            }
        }
    }

    fn on_close(&mut self, reason: &CloseReason) {
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
        self.tx = None;
    }
}

/// The receiving end of [`Established::start_channel`](crate::Established::start_channel).
#[derive(Debug)]
pub struct Inbound {
    rx: mpsc::Receiver<Vec<Frame>>,
    current: VecDeque<Frame>,
    spare: Arc<Mutex<Vec<Vec<Frame>>>>,
    reason: Arc<Mutex<Option<CloseReason>>>,
}

impl Inbound {
    /// The next inbound frame, or `None` once the connection has ended and
    /// every frame received before has been returned.
    pub async fn recv(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = self.current.pop_front() {
                return Some(f);
            }
            let mut batch = self.rx.recv().await?;
            self.current.extend(batch.drain(..));
            let mut spare = self.spare.lock().unwrap_or_else(PoisonError::into_inner);
            // Keep a few empty vectors for the reader; the rest are freed.
            if spare.len() < 8 {
                spare.push(batch);
            }
        }
    }

    /// Why the connection ended, once [`recv`](Self::recv) has returned
    /// `None`.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
